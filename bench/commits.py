"""How fast a run commits groups on an object store: parts and done-markers one at a time against side by side.

    .venv/bin/python bench/commits.py [--stores s3] [--groups 192] [--latency-ms 0,30] [--in-flight 1,16]
        [--rounds 2]

An output on moto's S3 server or the GCS emulator, each reached through the
tests' fault proxy (`tests/storage/storage_servers.py`), which delays every
request by --latency-ms: a cloud object store's small PUT, HEAD or copy takes
tens of milliseconds, these servers on 127.0.0.1 about one. Each group is one tiny document's
chunk row. The writer's side (`sink.write_block`, a writer actor's call) gets
them in blocks of 32 groups, about what one encoder call of tiny files holds,
and commits a part per group; then the driver's side (`Ledger`) gets each
block's summaries, as its loop takes them, and writes a done-marker per group.
Each side is timed alone, to the last part or marker landed: groups/s is what
it can commit at most, whatever the stages do. --in-flight is the requests
side by side (`files.IN_FLIGHT`, the writer's and the ledger's; 1: both
before they went side by side). Settings alternate within each round. Needs the dev
extras (moto[server], gcp-storage-emulator). Never run as a test; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "storage")]

import pyarrow as pa  # noqa: E402
from machine import cpu_description  # noqa: E402  (bench/machine.py)

from pipeline.output import files, sink  # noqa: E402
from pipeline.output import ledger as ledger_module  # noqa: E402
from pipeline.output.resume import open_output  # noqa: E402
from pipeline.schemas import embedded_schema  # noqa: E402

from storage_servers import Servers  # noqa: E402
from support import MANIFEST  # noqa: E402  (tests/support.py)

BUCKET = "commits"
BLOCK = 32  # groups per writer call
SCHEMA = embedded_schema(4)


def chunk_row(group: str) -> dict:
    """A tiny document's one chunk, the whole of its group."""
    return {
        "doc_id": f"s3://in/{group}.txt",
        "chunk_index": 0,
        "text": "a short note",
        "char_start": 0,
        "char_end": 12,
        "n_tokens": 5,
        "embedding": [0.5] * 4,
        "group": group,
        "group_docs": 1,
        "doc_chunks": 1,
    }


def commit(output: str, groups: int, in_flight: int) -> tuple[float, float]:
    """Seconds to write `groups` groups' parts, then their markers, with `in_flight` requests side by side."""
    files.IN_FLIGHT = in_flight
    ledger = ledger_module.Ledger(output, open_output(output, overwrite=False, manifest=MANIFEST))
    names = [f"g{i:06d}" for i in range(groups)]
    ledger.expect(dict.fromkeys(names, 1))
    blocks = [
        pa.Table.from_pylist([chunk_row(g) for g in names[i : i + BLOCK]], schema=SCHEMA)
        for i in range(0, groups, BLOCK)
    ]
    started = time.perf_counter()
    summaries = [sink.write_block(block, output) for block in blocks]
    parts = time.perf_counter() - started
    started = time.perf_counter()
    for block in summaries:
        ledger.add(block)
    ledger.landed()
    markers = time.perf_counter() - started
    ledger.finish()
    assert ledger.done == groups and ledger.todo == 0
    return parts, markers


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # The GCS emulator's own cost grows with the objects it holds (it rewrites its metadata at every upload), so
    # that store's figures move with the order of the runs: on it, compare only runs of the same round.
    p.add_argument("--stores", default="s3", help="s3 (moto), gs (the GCS emulator), comma-separated")
    p.add_argument("--groups", type=int, default=192)
    p.add_argument("--latency-ms", default="0,30", help="added to every request, comma-separated")
    p.add_argument("--in-flight", default="1,16", help="requests side by side, comma-separated")
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    stores = a.stores.split(",")
    latencies = [int(x) for x in a.latency_ms.split(",")]
    in_flight = [int(x) for x in a.in_flight.split(",")]

    print(cpu_description())
    servers = Servers()
    try:
        with tempfile.TemporaryDirectory() as cache:
            os.environ.update(servers.env(Path(cache)))
        for store in stores:
            servers.make_bucket(store, BUCKET)
        seconds: dict[tuple[str, int, int], list[tuple[float, float]]] = {}
        run = 0
        for _ in range(a.rounds):
            for store, latency, n in itertools.product(stores, latencies, in_flight):
                proxy = servers.proxies[store]
                proxy.slow_rate, proxy.slow_seconds = (1.0 if latency else 0.0), latency / 1000
                run += 1
                timed = commit(f"{store}://{BUCKET}/out-{run}", a.groups, n)
                seconds.setdefault((store, latency, n), []).append(timed)
        print(f"{a.groups} groups of one tiny document, in writer calls of {BLOCK}; {a.rounds} rounds, median [range]")
        print("| store | latency added per request | side by side | parts: groups/s | markers: groups/s |")
        print("|---|---:|---:|---:|---:|")
        for key in itertools.product(stores, latencies, in_flight):
            cells = []
            for side in (0, 1):
                rates = sorted(a.groups / timed[side] for timed in seconds[key])
                cells.append(f"{statistics.median(rates):,.0f} [{rates[0]:,.0f}-{rates[-1]:,.0f}]")
            store, latency, n = key
            print(f"| {store} | {latency} ms | {n} | {cells[0]} | {cells[1]} |")
    finally:
        servers.stop()


if __name__ == "__main__":
    main()
