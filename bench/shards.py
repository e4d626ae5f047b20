"""Reading one big Parquet shard of short documents whole against cut into units, on a 2-CPU Ray.

    python bench/shards.py                 # a generated ~1 GB shard, 2 rounds of each
    python bench/shards.py --gb 0.25 --rounds 3

What splitting changes is how many extraction workers read a shard, so this
times the job's extraction stage (`pipeline.run.stages.extract_block`, as the job
runs it, here as tasks of 1 CPU each, at most 2 at a time) over the shard,
whole (one work unit: one worker) and in units (`pipeline.io.shards.plan_units`
planned in a Ray task first, its id pass counted in the time). Tokenising and
encoding are left out: at the encoder's rate here (about 9,000 tokens/s) a
gigabyte of text is hours. Each block is reduced to its row count in the
worker, so the driver receives counts, not text. Rounds alternate whole and
units; the table quotes each round's wall time, their ratio, and the driver's
peak RSS over the round (sampled every 50 ms). Never run as a test; results go
in BENCHMARKS.md.
"""

import argparse
import pathlib
import statistics
import sys
import threading
import time

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import ray

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from pipeline.io import shards  # noqa: E402
from pipeline.io.listing import InputFile  # noqa: E402
from pipeline.output.groups import record_groups, work_blocks  # noqa: E402
from pipeline.run.stages import extract_block  # noqa: E402

ROWS_PER_GROUP = 200_000  # row groups of ~35 MB: what Spark-like writers make for a 128 MB block


def make_shard(path: pathlib.Path, gb: float, rows_per_group: int = ROWS_PER_GROUP) -> int:
    """A Parquet shard of about `gb` GB: unique ids, 20-40 random words of 3-9 letters each; returns its rows."""
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(rng.choice(letters, n)) for n in rng.integers(3, 10, 20_000)]
    rows, target = 0, gb * 1e9
    with pq.ParquetWriter(path, pa.schema([("id", pa.string()), ("text", pa.string())])) as writer:
        while not path.exists() or path.stat().st_size < target:
            lengths = rng.integers(20, 41, rows_per_group)
            words = rng.integers(0, len(vocab), lengths.sum())
            ends = np.cumsum(lengths)
            texts = [" ".join(vocab[w] for w in words[e - n : e]) for e, n in zip(ends, lengths)]
            ids = [f"doc-{rows + i}" for i in range(rows_per_group)]
            writer.write_table(pa.table({"id": ids, "text": texts}), row_group_size=rows_per_group)
            rows += rows_per_group
    return rows


def count_rows(batch: pa.Table) -> pa.Table:
    return pa.table({"rows": [batch.num_rows]})


class PeakRss:
    """The driver's peak resident memory while the block runs."""

    def __enter__(self):
        self.peak, self.stopped = 0, threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        me = psutil.Process()
        while not self.stopped.wait(0.05):
            self.peak = max(self.peak, me.memory_info().rss)

    def __exit__(self, *exc):
        self.stopped.set()
        self.thread.join()


def read_once(shard: InputFile, split: bool) -> tuple[float, float, int, int, int]:
    """(seconds, of which planning, rows read, units, driver peak RSS bytes) for one pass over the shard."""
    with PeakRss() as rss:
        started = time.perf_counter()
        plan = None
        if split:
            plan = ray.get(ray.remote(num_cpus=1)(shards.plan_units).remote(shard.uri, shard.kind, shard.size))
        planning = time.perf_counter() - started
        listing = pa.table({"uri": [shard.uri], "kind": [shard.kind], "size": [shard.size]})
        blocks = list(work_blocks(record_groups(listing, 1, "bench"), lambda entry: plan))
        ds = (
            ray.data.from_arrow(blocks)
            .map_batches(extract_block, batch_size=None, batch_format="pyarrow", num_cpus=1)
            .map_batches(count_rows, batch_size=None, batch_format="pyarrow")
        )
        rows = sum(b["rows"].sum() for b in ds.iter_batches(batch_size=None, batch_format="numpy"))
        seconds = time.perf_counter() - started
    return seconds, planning, int(rows), len(plan.units) if plan else 1, rss.peak


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gb", type=float, default=1.0, help="shard size in GB (default 1)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--dir", default="/tmp/docembed-bench-shards")
    args = p.parse_args()
    folder = pathlib.Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"shard-{args.gb:g}gb.parquet"
    if not path.exists():
        started = time.perf_counter()
        rows = make_shard(path, args.gb)
        print(f"made {path}: {rows:,} rows, {path.stat().st_size / 1e9:.2f} GB in {time.perf_counter() - started:.0f}s")
    shard = InputFile(str(path), "parquet", path.stat().st_size)
    meta = pq.read_metadata(path)
    print(
        f"shard: {meta.num_rows:,} rows in {meta.num_row_groups} row groups, {shard.size / 1e9:.2f} GB; "
        f"unit size {shards.UNIT_BYTES >> 20} MiB"
    )

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    # Workers started and modules imported before the first timed round, on a shard of a few units.
    warm = folder / "warm-up.parquet"
    if not warm.exists():
        make_shard(warm, 0.001, rows_per_group=1000)
    read_once(InputFile(str(warm), "parquet", warm.stat().st_size), split=True)
    results = {False: [], True: []}
    for r in range(args.rounds):
        for split in (False, True):
            seconds, planning, rows, units, peak = read_once(shard, split)
            assert rows == meta.num_rows, (rows, meta.num_rows)
            results[split].append((seconds, peak))
            print(
                f"round {r + 1} {'units' if split else 'whole'}: {seconds:.1f}s (planning {planning:.1f}s), "
                f"{units} unit(s), {rows / seconds:,.0f} rows/s, driver peak RSS {peak / 2**20:.0f} MiB",
                flush=True,
            )
    ratios = [w[0] / u[0] for w, u in zip(results[False], results[True])]
    spread = f"{min(ratios):.2f}-{max(ratios):.2f}x"
    print(f"whole / units wall time: median {statistics.median(ratios):.2f}x, range {spread}")


if __name__ == "__main__":
    main()
