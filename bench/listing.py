"""Listing at scale: the streamed listing's entries/s, pages/s and peak memory for N small files, local, S3 and GCS.

    .venv/bin/python bench/listing.py [--sizes 20000,100000] [--repeats 2]

Default: iterate `list_pages` (page size 1,000) over the whole input and report
entries/s, pages/s and the process's peak RSS over its baseline, against a local
directory, moto's S3 server and the GCS emulator (on 127.0.0.1, on the same
cores, so their own time is part of those figures). For S3 it also times moto's
own answer to a plain 1,000-key `list_objects_v2` page at the start and end of
the bucket (boto3 direct), to check what its listing costs: moto's
`list_objects_v2` walks every key of the bucket and sorts the matches for each
page (`moto/s3/models.py`), so a listing of N keys costs it O(N^2).
What the driver does with the pages (groups, the recorded listing, its memory at
10M entries) is bench/scale.py's.

Each measurement is a fresh Python process, which imports what it runs first
and reports its RSS then as the baseline; its peak is VmHWM (ru_maxrss would
count the parent's pages at the fork, and the parent holds both stores). The
stores alternate within each round. Files are ~100-byte .txt notes, 1,000 per
directory (so N/1,000 top-level prefixes, listed side by side). moto and the
emulator run in this process, filled directly (`Stores`); the listings reach
them over HTTP. Needs the dev extras (moto[server], gcp-storage-emulator).
Never run as a test; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "storage")]

from storage_servers import REGION, free_port, s3_client  # noqa: E402

PER_DIR = 1000

# Each measurement is one of these scripts after HEADER, in a process of its own.
HEADER = """
import json, sys, time
sys.path.insert(0, {repo!r})

def rss_mib(field="VmRSS"):
    status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
    return int(status[field].split()[0]) / 1024
"""

# The streamed listing.
STREAM = """
from pipeline.io.listing import list_pages
import boto3, google.cloud.storage  # loaded by the first listing of a store: not the listing's memory

baseline = rss_mib()
t0 = time.perf_counter()
entries = pages = 0
first = None
for page in list_pages([sys.argv[1]], page_size=1000):
    entries += page.entries.num_rows
    pages += 1
    first = first or time.perf_counter() - t0
t1 = time.perf_counter()
print("BENCH", json.dumps({{
    "files": entries, "pages": pages, "list_s": t1 - t0, "first_page_s": first,
    "entries_per_s": entries / (t1 - t0), "pages_per_s": pages / (t1 - t0),
    "baseline_rss_mib": baseline, "peak_rss_mib": rss_mib("VmHWM"),
}}), flush=True)
"""


def note(i: int) -> bytes:
    return f"Note {i}: a short record about item {i * 7 % 13}, one of many small files in a large corpus.\n".encode()


def names(n: int) -> list[str]:
    return [f"d{i // PER_DIR:04d}/note-{i:07d}.txt" for i in range(n)]


def write_local(root: Path, n: int) -> None:
    for name in names(n):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(note(int(name[-11:-4])))


class Stores:
    """moto's S3 server and the GCS emulator in this process, filled directly (not over HTTP): setup, not measured.

    Filling them over HTTP would take hours at 100k objects: the emulator
    rewrites its whole metadata file on every upload (O(N^2) to fill) and moto
    answers ~100 PUTs/s here. The listings under test reach both over HTTP, from
    a process of their own.
    """

    def __init__(self):
        from gcp_storage_emulator.server import create_server
        from moto.server import ThreadedMotoServer

        self.s3_port, gcs_port = free_port(), free_port()
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request
        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=self.s3_port, verbose=False)
        self.moto.start()
        self.gcs = create_server("127.0.0.1", gcs_port, in_memory=True)
        self.gcs.start()
        self.env = {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.s3_port}",
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{gcs_port}",
        }

    def fill(self, bucket: str, n: int) -> None:
        from gcp_storage_emulator.handlers import buckets, objects
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        s3 = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
        s3.create_bucket(bucket, REGION)
        gcs = self.gcs._storage
        buckets.create_bucket(bucket, gcs)
        for name in names(n):
            key, body = f"corpus/{name}", note(int(name[-11:-4]))
            s3.put_object(bucket, key, body)
            gcs._store.write_bytes(gcs._object_path(bucket, key), body)
            url = self.env["STORAGE_EMULATOR_HOST"]
            resource = objects._make_object_resource(url, bucket, key, "text/plain", str(len(body)))
            gcs.objects.setdefault(bucket, {})[key] = objects._checksums(body, resource)

    def stop(self) -> None:
        self.gcs.stop()
        self.moto.stop()


def moto_page_s(client, bucket: str, n: int) -> dict:
    """Seconds moto takes to answer one 1,000-key page at the start and at the end of a bucket of n keys."""

    def timed(**start) -> float:
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            client.list_objects_v2(Bucket=bucket, Prefix="corpus/", MaxKeys=1000, **start)
            runs.append(time.perf_counter() - t0)
        return statistics.median(runs)

    return {"moto_first_page_s": timed(), "moto_last_page_s": timed(StartAfter=f"corpus/{names(n)[-1000]}")}


def measure(script: str, location: str, env: dict) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", (HEADER + script).format(repo=str(REPO)), location],
        capture_output=True, text=True, cwd=REPO, env=env,
    )  # fmt: skip
    line = next((out for out in result.stdout.splitlines() if out.startswith("BENCH ")), None)
    if line is None:
        raise RuntimeError(f"measuring {location} failed: {result.stderr[-3000:]}")
    return json.loads(line[len("BENCH ") :])


def summary(runs: list[dict]) -> dict:
    """Medians of every figure, and the spread of the listing's time."""
    out = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0] if isinstance(runs[0][k], float)}
    out.update({k: v for k, v in runs[0].items() if isinstance(v, int)})
    out["list_s_spread"] = [round(min(r["list_s"] for r in runs), 2), round(max(r["list_s"] for r in runs), 2)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="20000,100000")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    script, kinds = STREAM, ("local", "s3", "gs")
    stores = Stores()
    try:
        client = s3_client(stores.env["AWS_ENDPOINT_URL"], stores.env)
        env = {**os.environ, **stores.env}
        results = {}
        with tempfile.TemporaryDirectory() as tmp:
            for n in sizes:
                started = time.time()
                locations = {"local": str(Path(tmp) / f"corpus-{n}"), "s3": f"s3://bench-{n}/corpus"}
                locations["gs"] = f"gs://bench-{n}/corpus"
                write_local(Path(locations["local"]), n)
                stores.fill(f"bench-{n}", n)
                print(f"{n} files written in {time.time() - started:.0f}s", flush=True)
                runs = {kind: [] for kind in kinds}
                for _ in range(args.repeats):
                    for kind in kinds:
                        runs[kind].append(measure(script, locations[kind], env))
                    print(n, {k: v[-1] for k, v in runs.items()}, flush=True)
                results[n] = {k: summary(v) for k, v in runs.items()}
                results[n]["s3"].update(moto_page_s(client, f"bench-{n}", n))
    finally:
        stores.stop()
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
