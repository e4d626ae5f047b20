"""Corpora whose groups a window of PDFs' size cannot fill an encoder call with: before and after a change.

    flock -x /tmp/docembed-heavy.lock .venv/bin/python bench/window.py --trees /tmp/main . [--rounds 1] \
        [--corpora scanned "one-line shards" mixed]

Three corpora, each run as a whole job (`bench/scale.py`'s `real_run`: `jobs/embed.py --quiet` started in
the tree) by every tree in turn, round after round:
  - scanned: 600 PDFs of one page without text, an error row each, sixteen to a pack;
  - one-line shards: 200 `.jsonl` files of one short document, a group each;
  - mixed: 9 PDFs and text files with 7 small shards sorted among them, a run of files broken up by shards.
Prints each job's wall and `_SUCCESS`'s `read_window` (how often the stages starved behind the read's
window, how often it stalled for 30 s). Never run as a test; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
import time
from pathlib import Path

import pypdf
from machine import cpu_description
from scale import real_run


def blank_pdf() -> bytes:
    writer = pypdf.PdfWriter()
    writer.add_blank_page(width=612, height=792)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def corpora(root: Path) -> dict[str, Path]:
    scanned, shards, mixed = root / "scanned", root / "shards", root / "mixed"
    for d in (scanned, shards, mixed):
        d.mkdir()
    pdf = blank_pdf()
    for i in range(600):
        (scanned / f"s{i:04d}.pdf").write_bytes(pdf)
    for i in range(200):
        line = {"id": f"d{i}", "text": f"Document {i}. It says a few words about topic {i % 7}."}
        (shards / f"s{i:04d}.jsonl").write_text(json.dumps(line) + "\n")
    for i in range(16):
        name = f"f{i:02d}"
        if i % 2 and i < 14:
            (mixed / f"{name}.jsonl").write_text(json.dumps({"id": name, "text": f"Shard {i} of the mix."}) + "\n")
        elif i % 3:
            (mixed / f"{name}.txt").write_text(f"Text file {i}. A sentence or two about nothing much.\n")
        else:
            (mixed / f"{name}.pdf").write_bytes(pdf)
    return {"scanned": scanned, "one-line shards": shards, "mixed": mixed}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trees", nargs="+", type=Path, default=[Path(".")], help="checkouts, run in turn")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--corpora", nargs="+", default=["scanned", "one-line shards", "mixed"])
    args = ap.parse_args()
    trees = [t.resolve() for t in args.trees]
    print(f"# bench/window.py on {cpu_description()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| corpus | tree | round | wall s | inputs | read_window |")
    print("|---|---|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, corpus in corpora(tmp).items():
            if name not in args.corpora:
                continue
            for r in range(args.rounds):
                for k, tree in enumerate(trees):
                    run = real_run(corpus, tmp / f"out-{name}-{r}-{k}", tree)
                    window = run["read_window"] or "(not reported)"
                    print(f"| {name} | {tree} | {r} | {run['wall_s']:.1f} | {run['inputs']} | {window} |", flush=True)


if __name__ == "__main__":
    main()
