"""Search a finished output: the chunks closest to a query.

Embeds the query with the same encoder the job used and prints the closest chunks.
"""

from __future__ import annotations

import textwrap

from pipeline import Embedder
from pipeline.cli import error_line
from pipeline.encode.compile_cache import enable_compilation_cache
from pipeline.errors import UserError
from pipeline.options import parse_options
from pipeline.results import read_report, search


def excerpt(text: str, head: int = 200, tail: int = 100) -> str:
    """A chunk's text on one line, its middle left out when long: its start and its end show where it was cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= head + tail else f"{flat[:head]} […] {flat[-tail:]}"


def main(argv: list[str] | None = None, prog: str = "jobs/search.py") -> int:
    a = parse_options(argv, "search", prog=prog, description=__doc__.split("\n\n")[0])
    try:
        if a["top"] < 1:
            raise UserError(f"--top must be at least 1, got {a['top']}")
        if not a["query"].strip():
            raise UserError(f"--query must not be blank, got {a['query']!r}")
        report = read_report(a["output"])
        # The query's program, loaded from the cache after the first search instead of compiled at each.
        enable_compilation_cache(a["compile_cache"] or None)
        embedder = Embedder.for_output(a["output"], report)
        query_D = embedder.embed([a["query"]], prompt=a["prompt"])[0]  # the prompt is checked
        hits = search(a["output"], query_D, a["top"])
        if not hits.num_rows:
            failed = report["counts"]["docs_failed"]
            raise UserError(f"{a['output']} holds no embedded chunk: its {failed} documents failed (see errors/)")
    except UserError as e:
        return error_line(str(e))
    print(f"top {len(hits)} chunks for: {a['query']!r}")
    for rank, hit in enumerate(hits.to_pylist(), 1):
        pages = f" pages {hit['page_start']}-{hit['page_end']}" if hit["page_start"] is not None else ""
        print(f"{rank}. score {hit['score']:.3f}  {hit['doc_id']} chunk {hit['chunk_index']}{pages}")
        print(textwrap.indent(textwrap.fill(excerpt(hit["text"]), 100), "     "))
    return 0
