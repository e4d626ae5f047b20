"""Search a finished output: `python jobs/search.py --output DIR --query TEXT [--top K]`.

Embeds the query with the same encoder the job used and prints the closest chunks.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import Embedder  # noqa: E402
from pipeline.errors import UserError  # noqa: E402
from pipeline.results import nearest, read_report, read_table  # noqa: E402


def excerpt(text: str, head: int = 200, tail: int = 100) -> str:
    """A chunk's text on one line, its middle left out when long: its start and its end show where it was cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= head + tail else f"{flat[:head]} […] {flat[-tail:]}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="jobs/search.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--output", required=True, metavar="DIR", help="output directory of a finished job")
    p.add_argument("--query", required=True, help="natural-language query")
    p.add_argument("--top", type=int, default=3, metavar="K")
    p.add_argument(
        "--prompt",
        metavar="NAME|TEXT",
        help="the query's prompt, as the job's --prompt (e.g. search_query; default: the model's default)",
    )
    a = p.parse_args(argv)
    try:
        report = read_report(a.output)
        table = read_table(a.output)
        # The output's own --dim, so that the query is truncated alike.
        embedder = Embedder.load(report["config"]["model"], dim=report["config"]["encoder"].get("dim"))
        if embedder.fingerprint != report["model"]["fingerprint"]:
            raise UserError(f"{a.output} was embedded with another model ({report['model']['id']}) than the one loaded")
    except UserError as e:
        print(f"docembed: error: {e}", file=sys.stderr)
        return 2
    hits = nearest(table, embedder.embed([a.query], prompt=a.prompt)[0], a.top)
    print(f"top {len(hits)} chunks for: {a.query!r}")
    for rank, hit in enumerate(hits.to_pylist(), 1):
        pages = f" pages {hit['page_start']}-{hit['page_end']}" if hit["page_start"] is not None else ""
        print(f"{rank}. score {hit['score']:.3f}  {hit['doc_id']} chunk {hit['chunk_index']}{pages}")
        print(textwrap.indent(textwrap.fill(excerpt(hit["text"]), 100), "     "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
