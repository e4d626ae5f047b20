"""Scale: the driver's and Ray head's memory, wall, docs/s and time to the first committed group, against corpus size.

    .venv/bin/python bench/scale.py [--files 1000,4000,16000] [--pdf-files 1000,10000] [--plan-entries 10000000]
                                    [--pdf-layers N] [--tally-calls 100000]

Real runs: `docembed embed --quiet` in a process of its own (with its private
local Ray) on N tiny `.txt` files (~100 bytes, 1,000 per directory), and on
the 31 real PDFs of ../shared/corpus hard-linked to each of `--pdf-files` sizes. Every 0.2 s
the driver's RSS and that of Ray's head processes (gcs_server, raylet,
dashboard and its agents, log monitor: what a head node holds for the job) are
sampled from /proc; workers are not the head's. Time to the first group and
docs/s come from `_SUCCESS`. The per-file slopes are least-squares fits of peak
RSS against files, per kind of corpus, extrapolated to 10M.

`--pdf-layers N` runs the PDF corpora on the bundled model cut to its first N
layers (the same tokenizer, windows and chunks; its embeddings are not the
model's). What a run holds per file on the driver and Ray's head does not
depend on the encoder's depth, while on 2 cores the whole model makes 10k PDFs
a run of hours; the rows say which model ran.

The planning-only run drives the job's own listing path (GroupCutter, the
recorded parts under `_inputs/`, the ledger's per-group account and the run's
coordinator actor) with a generator of `--plan-entries` synthetic entries
standing in for the store, in this process, and reports its peak RSS and time.
The tally run feeds `--tally-calls` encoder calls' increments, as an encoder
sends them (pickled, with its compiled shapes and where it runs), to the run's
tally (`RunTally`, which the coordinator actor is) in this process, and reports
what it holds after a tenth of them and after all, and how long the queries take
that the read's wait asks four times a second and the progress line once.

Never run as a test; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from machine import cpu_description  # noqa: E402

PER_DIR = 1000
CORPUS = REPO.parent / "shared" / "corpus"
HEAD = ("gcs_server", "raylet", "dashboard", "log_monitor", "monitor", "runtime_env_agent", "dashboard_agent")


def tiny_corpus(root: Path, files: int) -> Path:
    for i in range(files):
        d = root / f"d{i // PER_DIR:05d}"
        if i % PER_DIR == 0:
            d.mkdir(parents=True)
        (d / f"n{i:08d}.txt").write_text(f"Note {i}: a short document about item {i * 7 % 1013} in the archive.\n")
    return root


def pdf_corpus(root: Path, files: int) -> Path:
    pdfs = sorted(CORPUS.rglob("*.pdf"))
    for i in range(files):
        d = root / f"d{i // PER_DIR:05d}"
        d.mkdir(parents=True, exist_ok=True)
        os.link(pdfs[i % len(pdfs)], d / f"p{i:08d}.pdf")  # hard links: the same bytes, no disk
    return root


def _is_head(proc: psutil.Process) -> bool:
    try:
        cmd = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return any(name in cmd for name in HEAD) and "ray::" not in cmd and "default_worker" not in cmd


def cut_model(layers: int, dest: Path) -> Path:
    """The bundled model's directory with only its first `layers` encoder layers (config and weights)."""
    from safetensors.numpy import load_file, save_file

    from pipeline.encode.model_dir import resolve

    source = resolve(None).path
    replaced = {source / "model.safetensors", source / "config.json"}
    shutil.copytree(source, dest, ignore=lambda d, names: [n for n in names if Path(d) / n in replaced])
    config = json.loads((source / "config.json").read_text())
    kept = {f"encoder.layer.{i}." for i in range(layers)}
    weights = load_file(source / "model.safetensors")
    save_file(
        {k: v for k, v in weights.items() if ".layer." not in k or any(k.startswith(p) for p in kept)},
        dest / "model.safetensors",
    )
    (dest / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
    return dest


def real_run(corpus: Path, out: Path, tree: Path = REPO, model: Path | None = None) -> dict:
    """One job, sampled: peak RSS of the driver and of Ray's head processes, wall, and _SUCCESS's figures.

    `tree`: the checkout whose code runs (`jobs/embed.py`, this interpreter; its workers inherit PYTHONPATH).
    `model`: a model directory instead of the bundled default."""
    cmd = [sys.executable, str(tree / "jobs" / "embed.py"), "--input", str(corpus), "--output", str(out), "--quiet"]
    cmd += [] if model is None else ["--model", str(model)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    # cwd too: Ray puts the driver's working directory on its workers' sys.path ahead of PYTHONPATH, so from
    # another checkout's directory the workers would run that checkout's stages.
    proc = subprocess.Popen(cmd, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    driver = psutil.Process(proc.pid)
    peak_driver = peak_head = 0
    while proc.poll() is None:
        try:
            peak_driver = max(peak_driver, driver.memory_info().rss)
            head = [p for p in driver.children(recursive=True) if _is_head(p)]
            peak_head = max(peak_head, sum(_rss(p) for p in head))
        except psutil.Error:
            pass
        time.sleep(0.2)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {proc.stderr.read()[-2000:]}")
    success = json.loads((out / "_SUCCESS").read_text())
    return {
        "driver_mb": peak_driver / 2**20,
        "head_mb": peak_head / 2**20,
        "wall_s": wall,
        "docs_per_s": success["throughput"]["docs_per_s"],
        "first_group_s": success["first_group_seconds"],
        "startup": success["startup_seconds"],
        "inputs": success["counts"]["inputs"],
        "read_window": success.get("read_window"),  # absent before 2026-12-06
    }


def _rss(proc: psutil.Process) -> int:
    try:
        return proc.memory_info().rss
    except psutil.Error:
        return 0


def plan_only(entries: int, out: Path) -> dict:
    """The driver's listing path over `entries` synthetic entries: peak RSS (ru_maxrss) and time."""
    import pyarrow as pa
    import ray

    from pipeline.io.listing import Page
    from pipeline.output.groups import GroupCutter
    from pipeline.output.ledger import Ledger
    from pipeline.output.resume import open_output
    from pipeline.run.feed import Recorder
    from pipeline.run.tally import RunCoordinator

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def pages():
        page = 1000
        for start in range(0, entries, page):
            n = min(page, entries - start)
            uris = [f"s3://crawl/shard{(start + i) // 100_000:04d}/doc{start + i:010d}.txt" for i in range(n)]
            yield Page(pa.record_batch({"uri": uris, "kind": ["text"] * n, "size": [100] * n}), 0)

    state = open_output(str(out), overwrite=False, manifest={"fingerprint": "bench"})
    ledger = Ledger(str(out), state)
    started = time.perf_counter()
    recorder = Recorder(str(out), state.record, pages(), GroupCutter(64, "bench"), ledger, RunCoordinator.remote())
    recorder.start()
    recorder.join()
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    ray.shutdown()
    return {
        "entries": entries,
        "groups": ledger.todo,
        "seconds": seconds,
        "peak_mb": peak / 2**20,
        "baseline_mb": baseline / 2**20,
        "parts": len(list((out / "_inputs").glob("part-*"))),
    }


def tally_calls(calls: int) -> dict:
    """The run's tally fed `calls` encoder calls from one encoder: what it holds (tracemalloc) after a tenth of
    them and after all, and one query's time at the end."""
    import collections
    import pickle
    import tracemalloc

    from pipeline.encode.batching import EncodeStats
    from pipeline.run.stage_clock import EncoderCall, Increment, RunTally, StageTotals

    ran = {
        "dtype": "float32",
        "mesh": {"data": 2, "model": 1},
        "attention": ["blockwise at 256 keys"],
        "dense": ["xla"],
    }
    state = EncoderCall(
        EncodeStats(30_000, 32_000, 9), ((4, 256), (4, 128), (4, 64)), {"hits": 3, "misses": 1}, ran=ran
    )
    where = {"node_id": "a" * 56, "actor_id": "b" * 32}
    sent = []
    for i in range(calls):
        counts = collections.Counter(chunks=128, tokens=30_000 + i % 7, batches=9, rows_in=128, rows_out=300)
        encode = StageTotals(1.0, counts, {"host:1"}, float(i), i + 1.0)
        sent.append(pickle.dumps(Increment("host:1", {"encode": encode}, f"encode:{i:016x}/0", state, where)))
    tally = RunTally()
    held = {}
    tracemalloc.start()
    for i, message in enumerate(sent, 1):
        tally.record(pickle.loads(message))
        if i in (calls // 10, calls):
            held[i] = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    seconds = {}
    for query in ("stages", "encoders"):
        started = time.perf_counter()
        getattr(tally, query)()
        seconds[query] = time.perf_counter() - started
    return {"calls": calls, "held": held, **seconds}


def slope_kib(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """(KiB per file, MB at 0 files) of a least-squares line through (files, MB)."""
    slope, intercept = np.polyfit(np.array(xs, float), np.array(ys, float), 1)
    return slope * 1024, intercept


def row(kind: str, n: int, r: dict) -> str:
    return (
        f"| {kind} | {n:,} | {r['driver_mb']:.0f} MB | {r['head_mb']:.0f} MB | {r['wall_s']:.0f} s | "
        f"{r['docs_per_s']:.1f} | {r['first_group_s']:.1f} s |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", default="1000,4000,16000", help="tiny .txt corpus sizes, comma-separated")
    ap.add_argument("--pdf-files", default="", help="sizes of the 31 real PDFs hard-linked to that many files")
    ap.add_argument("--plan-entries", type=int, default=10_000_000)
    ap.add_argument("--pdf-layers", type=int, default=0, help="PDF runs on the bundled model cut to N layers")
    ap.add_argument("--tally-calls", type=int, default=100_000, help="encoder calls fed to the run's tally")
    args = ap.parse_args()
    print(f"# bench/scale.py on {cpu_description()}, {time.strftime('%Y-%m-%d')}")
    # Each row is printed as its run ends: a run of 10k PDFs takes hours on 2 cores.
    print("\n| corpus | files | driver peak RSS | head peak RSS | wall | docs/s | first group |")
    print("|---|---:|---:|---:|---:|---:|---:|", flush=True)

    runs: dict[str, list[tuple[int, dict]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pdf_model, pdf_kind = None, "real PDFs (31, linked)"
        if args.pdf_layers:
            pdf_model = cut_model(args.pdf_layers, tmp / "model")
            pdf_kind += f", the model cut to {args.pdf_layers} of its layers"
        for kind, make, sizes, model in (
            ("tiny .txt", tiny_corpus, args.files, None),
            (pdf_kind, pdf_corpus, args.pdf_files, pdf_model),
        ):
            for n in (int(n) for n in sizes.split(",") if n):
                corpus = make(tmp / f"in{n}", n)
                r = real_run(corpus, tmp / f"out{n}", model=model)
                shutil.rmtree(corpus)
                shutil.rmtree(tmp / f"out{n}")
                runs.setdefault(kind, []).append((n, r))
                print(row(kind, n, r), flush=True)

        print("\nstart-up, seconds from the driver's start (`startup_seconds` in _SUCCESS):")
        for kind, done in runs.items():
            for n, r in done:
                print(f"- {kind}, {n:,} files: " + ", ".join(f"{step} {t:.1f}" for step, t in r["startup"]))
        for kind, done in runs.items():
            if len(done) < 2:
                continue
            xs = [n for n, _ in done]
            for name in ("driver_mb", "head_mb"):
                kib, at0 = slope_kib(xs, [r[name] for _, r in done])
                print(
                    f"\n{kind}, {name}: {kib:.3f} KiB per file (fit), {at0:.0f} MB at 0 files; at 10M files: "
                    f"{at0 + kib * 10_000_000 / 1024:.0f} MB"
                )
        if args.plan_entries:
            plan = plan_only(args.plan_entries, tmp / "plan")
            print(
                f"\nplanning only, {plan['entries']:,} synthetic entries: {plan['seconds']:.0f} s "
                f"({plan['entries'] / plan['seconds']:,.0f} entries/s), {plan['groups']:,} groups, "
                f"{plan['parts']} parts; driver peak RSS {plan['peak_mb']:.0f} MB "
                f"({plan['baseline_mb']:.0f} MB after Ray started)"
            )
    if args.tally_calls:
        t = tally_calls(args.tally_calls)
        held = ", ".join(f"{b / 2**20:.2f} MB after {n:,}" for n, b in t["held"].items())
        print(
            f"\nthe run's tally, fed {t['calls']:,} encoder calls: it holds {held}; "
            f"a query of its stages {t['stages'] * 1e3:.2f} ms, of its encoders {t['encoders'] * 1e3:.2f} ms"
        )


if __name__ == "__main__":
    main()
