"""Where a job's CPU goes: every process it starts, by Ray process title, over time.

    .venv/bin/python bench/job_cpu.py [--copies N] [--input DIR] [--dtype D]

Runs the job (a private local Ray, default options but the encoder's dtype) on
the bundled samples (or --input) copied N times, in a child process, and
samples `/proc/<pid>/stat` of the child and all its descendants every 0.2 s.
Each interval's CPU time is charged to the process's title at the interval's
end (Ray retitles a worker `ray::<actor or task>`), so a worker that ran
several things shows each. Prints the CPU-seconds per title over the run, the
encoder actor's cores against all other processes' per second, the CPU of
every other title while the encoder was busy (what it shares its cores with),
and each process's first sighting and titles. Linux only. This is how BENCHMARKS.md's
"Where the gap was" was found.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from corpus import corpus_copies  # noqa: E402  (bench/corpus.py)
from machine import cpu_description  # noqa: E402  (bench/machine.py)

from kernels.compute_dtype import DTYPES  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
ENCODER_TITLE = "EncodeBlock"
JOB = """
import sys, time
from pipeline import JobConfig, run_job
from pipeline.encode.encoder_config import EncoderConfig
t = time.perf_counter()
report = run_job(JobConfig(inputs=(sys.argv[1],), output=sys.argv[2], encoder=EncoderConfig(dtype=sys.argv[3])))
encode = report.stages.stages["encode"]
print(f"job: {time.perf_counter() - t:.1f} s wall, encoder span {encode.span_s:.1f} s, busy {encode.busy_s:.1f} s")
"""

Snapshot = dict[int, tuple[int, str, int]]  # pid -> (CPU ticks, title, parent pid)


def snapshot() -> Snapshot:
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline") as f:
                title = f.read().replace("\0", " ").strip()
        except OSError:
            continue  # gone between the listing and the read
        out[int(pid)] = (int(fields[11]) + int(fields[12]), title, int(fields[1]))
    return out


def descendants(snap: Snapshot, root: int) -> set[int]:
    tree = collections.defaultdict(list)
    for pid, (_, _, parent) in snap.items():
        tree[parent].append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo.extend(tree[pid])
    return found


def short(title: str) -> str:
    """A Ray title as is; a process not yet retitled by the script or binary it runs."""
    if title.startswith("ray::"):
        return title[:60]
    words = title.split()
    return " ".join(Path(w).name for w in words[:3])[:60] if words else "?"


def split_encoder(by_title: collections.Counter) -> tuple[int, collections.Counter]:
    """CPU ticks by title -> (the encoder actor's ticks, every other title's)."""
    others = collections.Counter({k: v for k, v in by_title.items() if ENCODER_TITLE not in k})
    return by_title.total() - others.total(), others


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", type=Path, default=REPO / "samples")
    p.add_argument("--copies", type=int, default=20)
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="the encoder's")
    a = p.parse_args()
    print(cpu_description())
    with tempfile.TemporaryDirectory() as tmp:
        corpus = corpus_copies(a.input, a.copies, Path(tmp) / "corpus")
        child = subprocess.Popen([sys.executable, "-c", JOB, str(corpus), str(Path(tmp) / "out"), a.dtype], cwd=REPO)
        snaps = [(time.time(), snapshot())]
        while child.poll() is None:
            time.sleep(0.2)
            snaps.append((time.time(), snapshot()))
    if child.returncode:
        sys.exit(f"the job failed ({child.returncode})")

    per_title: collections.Counter = collections.Counter()
    steps = []  # (seconds since start, interval length, CPU ticks by title in it)
    seen: dict[int, tuple[float, list[str]]] = {}  # pid -> (first seen, its titles in order)
    t0 = snaps[0][0]
    for (t_prev, prev), (t, snap) in zip(snaps, snaps[1:]):
        step: collections.Counter = collections.Counter()
        for pid in descendants(snap, child.pid) & snap.keys():
            ticks, title, _ = snap[pid]
            step[short(title)] += ticks - prev.get(pid, (0, "", 0))[0]
            titles = seen.setdefault(pid, (t - t0, []))[1]
            if not titles or titles[-1] != short(title):
                titles.append(short(title))
        per_title += step
        steps.append((t - t0, t - t_prev, step))

    wall = snaps[-1][0] - t0
    print(f"\nCPU-seconds by process title over the run ({wall:.1f} s, {per_title.total() / TICK:.1f} CPU-s):")
    for title, ticks in per_title.most_common(20):
        print(f"  {ticks / TICK:6.2f}  {title}")
    print("\nabout every second: the encoder actor's cores | all other processes' cores: the top three")
    for i in range(0, len(steps), 5):
        bin_ = steps[i : i + 5]
        seconds = sum(dt for _, dt, _ in bin_)
        ticks = sum((step for _, _, step in bin_), collections.Counter())
        encoder, others = split_encoder(ticks)
        top = ", ".join(f"{k} {v / TICK / seconds:.2f}" for k, v in others.most_common(3) if v)
        print(f"  {bin_[0][0]:5.1f}s  {encoder / TICK / seconds:4.2f} | {others.total() / TICK / seconds:4.2f}  {top}")
    busy = [(dt, step) for _, dt, step in steps if split_encoder(step)[0] > TICK * dt / 2]
    busy_s = sum(dt for dt, _ in busy)
    encoder, beside = split_encoder(sum((step for _, step in busy), collections.Counter()))
    print(
        f"\nwhile the encoder actor was busy (over half a core; {busy_s:.1f} s): the encoder "
        f"{encoder / TICK:.1f} CPU-s ({encoder / TICK / max(busy_s, 1e-9):.2f} cores), and beside it:"
    )
    for title, ticks in beside.most_common(15):
        if ticks:
            print(f"  {ticks / TICK:6.2f}  {title}")
    print("\nprocesses: first seen (s), titles in order")
    for first, titles in sorted(seen.values()):
        print(f"  {first:5.1f}s  {' -> '.join(titles)}")


if __name__ == "__main__":
    main()
