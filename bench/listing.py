"""Listing and planning at scale: the driver's time and peak memory for N small files, local and on S3.

    .venv/bin/python bench/listing.py [--sizes 50000,200000] [--repeats 2]

What the driver does before any worker starts: list the inputs (`list_inputs`),
cut them into commit groups (`form_groups`) and build the extraction stage's
input blocks (`work_blocks`), with the job's own functions and settings. Each
measurement is a fresh Python process (so its peak RSS, ru_maxrss, is this work's
alone), which imports the job first and reports its RSS then as the baseline.
The stores alternate within each round: a local directory, and a bucket on
moto's S3 server (a Python process on 127.0.0.1, on the same cores, so its own
time is part of the S3 figure). Files are ~100-byte .txt notes, 1,000 per
directory. Needs the dev extras (moto[server]). Never run as a test; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "storage")]

from storage_servers import REGION, s3_client, start_moto  # noqa: E402

PER_DIR = 1000

# The driver's planning, measured in a process of its own. The job's listing and
# planning functions are imported here, in one place.
MEASURE = """
import json, resource, sys, time
sys.path.insert(0, {repo!r})
from pipeline.config import JobConfig
from pipeline.io.listing import list_inputs
from pipeline.output.groups import form_groups, work_blocks
from pipeline.run.stages import EXTRACT_BATCH

def rss_mib():
    status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
    return int(status["VmRSS"].split()[0]) / 1024

baseline = rss_mib()
t0 = time.perf_counter()
inputs, skipped = list_inputs([sys.argv[1]])
t1, rss1 = time.perf_counter(), rss_mib()
groups = form_groups(inputs, JobConfig(inputs=(sys.argv[1],), output="unused").group_size, salt="bench")
t2, rss2 = time.perf_counter(), rss_mib()
blocks = work_blocks(groups, EXTRACT_BATCH)
t3, rss3 = time.perf_counter(), rss_mib()
print("BENCH", json.dumps({{
    "files": len(inputs), "groups": len(groups), "blocks": len(blocks),
    "list_s": t1 - t0, "plan_s": t2 - t1, "blocks_s": t3 - t2, "total_s": t3 - t0,
    "baseline_rss_mib": baseline, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    # what each step left resident: the listing's includes what it freed again
    "listed_rss_mib": rss1 - baseline, "grouped_rss_mib": rss2 - rss1, "blocks_rss_mib": rss3 - rss2,
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


def write_s3(client, bucket: str, prefix: str, n: int) -> None:
    """Direct to moto with boto3 (not through pyarrow): the upload is setup, not measured."""

    def put(name: str) -> None:
        client.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=note(int(name[-11:-4])))

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(put, names(n)))


def measure(location: str, env: dict) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", MEASURE.format(repo=str(REPO)), location],
        capture_output=True, text=True, cwd=REPO, env=env,
    )  # fmt: skip
    line = next((out for out in result.stdout.splitlines() if out.startswith("BENCH ")), None)
    if line is None:
        raise RuntimeError(f"measuring {location} failed: {result.stderr[-3000:]}")
    return json.loads(line[len("BENCH ") :])


def summary(runs: list[dict]) -> dict:
    keys = (
        "list_s",
        "plan_s",
        "blocks_s",
        "total_s",
        "baseline_rss_mib",
        "peak_rss_mib",
        "listed_rss_mib",
        "grouped_rss_mib",
        "blocks_rss_mib",
    )
    out = {k: round(statistics.median(r[k] for r in runs), 3) for k in keys}
    out["total_s_spread"] = [round(min(r["total_s"] for r in runs), 2), round(max(r["total_s"] for r in runs), 2)]
    out["files"], out["groups"], out["blocks"] = runs[0]["files"], runs[0]["groups"], runs[0]["blocks"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="50000,200000")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    moto, creds = start_moto()
    try:
        client = s3_client(moto.url, creds)
        client.create_bucket(Bucket="bench")
        env = {**os.environ, **creds, "AWS_ENDPOINT_URL": moto.url, "AWS_REGION": REGION}
        results = {}
        with tempfile.TemporaryDirectory() as tmp:
            for n in sizes:
                started = time.time()
                write_local(Path(tmp) / f"corpus-{n}", n)
                write_s3(client, "bench", f"corpus-{n}", n)
                print(f"{n} files written in {time.time() - started:.0f}s", flush=True)
                runs = {"local": [], "s3": []}
                for _ in range(args.repeats):
                    runs["local"].append(measure(str(Path(tmp) / f"corpus-{n}"), env))
                    runs["s3"].append(measure(f"s3://bench/corpus-{n}", env))
                    print(n, {k: v[-1] for k, v in runs.items()}, flush=True)
                results[n] = {k: summary(v) for k, v in runs.items()}
    finally:
        moto.stop()
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
