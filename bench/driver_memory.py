"""Where the driver's memory goes over a run: the job in this process, its memory sampled each second.

    .venv/bin/python bench/driver_memory.py --pdfs 300 [--pdf-layers 1] [--trace] [--json out.json]
    .venv/bin/python bench/driver_memory.py --files 16000

`bench/scale.py` gives the driver's peak RSS against corpus size; this says
what it is made of. Every second: RSS and its anonymous, file and
shared-memory parts, glibc's memory in use and free in its arenas
(`mallinfo2`), and the blocks queued in front of each Ray Data operator. At
the end of the stream: the blocks and tasks of each operator, Python's traced
memory (`--trace`: tracemalloc from the start, by file), glibc's in-use and
free memory, and Python's own arenas with what is in use in them. Run it at
two corpus sizes: what grows with the corpus is the difference. Linux (glibc)
only. Never run as a test; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from pipeline.run.allocator import arrow_on_malloc  # noqa: E402

arrow_on_malloc()  # before pyarrow loads, as the driver's command does (pipeline.cli.embed)

from machine import cpu_description  # noqa: E402
from scale import cut_model, pdf_corpus, tiny_corpus  # noqa: E402

import pipeline.run.job as job  # noqa: E402
from pipeline.options import parse_job_args  # noqa: E402

MALLINFO2 = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()


class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in MALLINFO2]  # glibc's struct mallinfo2, in its order


LIBC = ctypes.CDLL("libc.so.6")
LIBC.mallinfo2.restype = Mallinfo2


def glibc_mb() -> tuple[float, float]:
    """(in use, free) in glibc's arenas, MB; memory mapped for big blocks apart."""
    info = LIBC.mallinfo2()
    return info.uordblks / 2**20, info.fordblks / 2**20


def rss_parts_mb() -> dict[str, float]:
    """This process's resident memory by kind (/proc/self/status), MB: anonymous (its own heap and stacks),
    file-backed (libraries) and shared memory (what it has touched of Ray's object store, /dev/shm)."""
    parts = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("RssAnon", "RssFile", "RssShmem"):
                parts[name[3:].lower()] = round(int(value.split()[0]) / 1024, 1)
    return parts


def pymalloc_mb() -> dict[str, float]:
    """Python's own allocator (obmalloc), MB: its arenas (mapped from the OS, outside glibc's, returned only
    when wholly empty) and the blocks in them in use; {} under tracemalloc. `sys._debugmallocstats` prints
    to the C stderr."""
    with tempfile.TemporaryFile("w+") as out:
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read()
    # Nothing is printed while tracemalloc wraps the allocator (--trace).
    arenas = re.search(r"(\d+) arenas \* (\d+) bytes/arena\s*=\s*([\d,]+)", text)
    used = re.search(r"# bytes in allocated blocks\s*=\s*([\d,]+)", text)
    if arenas is None or used is None:
        return {}
    return {
        "arenas": int(arenas.group(3).replace(",", "")) / 2**20,
        "in use": int(used.group(1).replace(",", "")) / 2**20,
    }


def queues(executor) -> dict[str, int]:
    """Blocks queued in front of each operator of the running dataset (Ray Data's private executor state)."""
    topology = dict(getattr(executor, "_topology", None) or {})
    return {op.name: state.total_enqueued_input_blocks() for op, state in topology.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pdfs", type=int, default=0, help="the 31 real PDFs hard-linked to this many files")
    ap.add_argument("--files", type=int, default=0, help="tiny .txt files (bench/scale.py's corpus)")
    ap.add_argument("--pdf-layers", type=int, default=1, help="PDF runs on the bundled model cut to N layers")
    ap.add_argument("--trace", action="store_true", help="tracemalloc from the start (slows the driver)")
    ap.add_argument("--json", help="write every sample here")
    args = ap.parse_args()

    process, samples, found, stop = psutil.Process(), [], {}, threading.Event()
    started = time.time()

    def sample() -> None:
        while not stop.is_set():
            used, free = glibc_mb()
            rss = process.memory_info().rss / 2**20
            samples.append((round(time.time() - started, 1), round(rss, 1), round(used, 1), round(free, 1)))
            samples[-1] += (queues(found.get("executor")), rss_parts_mb())
            time.sleep(1)

    run_groups = job._run_groups

    def observed(ds, *rest) -> None:  # the stream, then what the driver holds at its end
        # The job iterates the dataset's references, which leaves the executor off the dataset: kept here as made.
        create = ds._create_executor

        def created():
            found["executor"] = create()
            return found["executor"]

        ds._create_executor = created
        run_groups(ds, *rest)
        ops = getattr(found.get("executor"), "_topology", None) or {}
        found["ops"] = {
            op.name: [len(getattr(op, "_output_blocks_stats", [])), op.metrics.num_tasks_submitted] for op in ops
        }
        found["glibc_mb"] = glibc_mb()
        found["pymalloc_mb"] = pymalloc_mb()
        if tracemalloc.is_tracing():
            found["traced_mb"] = tracemalloc.get_traced_memory()[0] / 2**20
            top = tracemalloc.take_snapshot().statistics("filename")[:8]
            found["traced_top"] = [(str(s.traceback), round(s.size / 2**10)) for s in top]

    job._run_groups = observed
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        argv = ["--output", str(tmp / "out"), "--quiet"]
        if args.pdfs:
            argv += ["--input", str(pdf_corpus(tmp / "in", args.pdfs))]
            argv += ["--model", str(cut_model(args.pdf_layers, tmp / "model"))]
        else:
            argv += ["--input", str(tiny_corpus(tmp / "in", args.files))]
        cfg = parse_job_args(argv, "", "driver_memory")
        threading.Thread(target=sample, daemon=True).start()
        if args.trace:
            tracemalloc.start()
        job.run(cfg)
        stop.set()
        success = json.loads((tmp / "out" / "_SUCCESS").read_text())

    peak = max(s[1] for s in samples)
    peaks = {kind: max(s[5][kind] for s in samples) for kind in samples[0][5]}
    print(f"# bench/driver_memory.py on {cpu_description()}, {time.strftime('%Y-%m-%d')}")
    print(f"{args.pdfs or args.files} {'PDFs' if args.pdfs else 'tiny files'}, wall {success['wall_seconds']:.0f} s")
    print(
        f"driver peak RSS {peak:.1f} MB; at the stream's end glibc in use / free {found['glibc_mb'][0]:.1f} / "
        f"{found['glibc_mb'][1]:.1f} MB"
    )
    pymalloc = found["pymalloc_mb"]
    if pymalloc:
        print(f"at the stream's end Python's arenas {pymalloc['arenas']:.1f} MB, in use {pymalloc['in use']:.1f} MB")
    print("peak RSS by kind: " + ", ".join(f"{kind} {mb:.1f} MB" for kind, mb in peaks.items()))
    print("Ray Data blocks, tasks per operator: " + ", ".join(f"{k} {v[0]}, {v[1]}" for k, v in found["ops"].items()))
    if "traced_mb" in found:
        print(f"Python traced {found['traced_mb']:.1f} MB; top files (KiB): {found['traced_top']}")
    for s in samples[:: max(1, len(samples) // 12)]:
        print(f"  {s[0]:>6} s  RSS {s[1]} MB {s[5]}  glibc in use {s[2]}  free {s[3]}  queued {s[4]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"samples": samples, **found}, default=str))


if __name__ == "__main__":
    main()
