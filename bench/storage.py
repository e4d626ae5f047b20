"""Object storage against local files, and the driver's memory as the corpus grows.

    .venv/bin/python bench/storage.py [--copies 10] [--repeats 2] [--memory 1,10,100]

1. Throughput: the same job (the demo corpus `samples/` copied `--copies` times)
   reading from and writing to a local S3 server (moto, on 127.0.0.1) and on local
   files, alternately, on one local Ray; tokens/s from each run's report.
2. Driver memory: `jobs/embed.py` as a user runs it (its own local Ray) over 1x,
   10x and 100x the demo corpus; the driver's peak RSS (ru_maxrss of its process)
   and its RSS when the job has finished.

Needs the dev extras (moto[server]). Never run as a test; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SAMPLES = REPO / "samples"

from corpus import corpus_copies  # noqa: E402  (bench/corpus.py)

MEASURE_DRIVER = """
import resource, sys, time
sys.path.insert(0, {repo!r})
from jobs.embed import main
started = time.time()
code = main(sys.argv[1:])
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
print("BENCH", code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.time() - started,
      int(status["VmRSS"].split()[0]), flush=True)
"""


def start_moto() -> tuple[subprocess.Popen, str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=1)
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto did not start")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(corpus: Path, repeats: int, scratch: Path) -> dict:
    import boto3
    import pyarrow.fs as pafs
    import ray

    from pipeline import JobConfig, run_job
    from pipeline.io.filesystems import filesystem_for

    moto, url = start_moto()
    try:
        os.environ.update(
            AWS_ENDPOINT_URL=url, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-east-1"
        )
        boto3.client("s3", endpoint_url=url, region_name="us-east-1").create_bucket(Bucket="bench")
        fs, path = filesystem_for("s3://bench/corpus")
        pafs.copy_files(str(corpus), path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        # One warm-up run so that both sides find compiled programs in the cache.
        run_job(JobConfig(inputs=(str(SAMPLES),), output=str(scratch / "warmup")))
        runs = {"local": [], "s3": []}
        for r in range(repeats):
            for kind in ("local", "s3"):
                if kind == "local":
                    cfg = JobConfig(inputs=(str(corpus),), output=str(scratch / f"local-{r}"))
                else:
                    cfg = JobConfig(inputs=("s3://bench/corpus",), output=f"s3://bench/out-{r}")
                server_cpu = _cpu_seconds(moto.pid)
                report = run_job(cfg)
                runs[kind].append(
                    {
                        "wall_s": round(report.wall_seconds, 2),
                        "tokens_per_s": round(report.tokens / report.wall_seconds, 1),
                        # moto is a Python server on the same cores as the job: its CPU is taken from the encoder.
                        "s3_server_cpu_s": round(_cpu_seconds(moto.pid) - server_cpu, 2),
                    }
                )
                print(kind, runs[kind][-1], flush=True)
        ray.shutdown()
    finally:
        moto.terminate()
        moto.wait()
    summary = {k: statistics.median(x["tokens_per_s"] for x in v) for k, v in runs.items()}
    return {"runs": runs, "median_tokens_per_s": summary, "s3_vs_local": round(summary["s3"] / summary["local"], 3)}


def driver_memory(sizes: list[int], scratch: Path) -> dict:
    out = {}
    for copies in sizes:
        corpus = corpus_copies(SAMPLES, copies, scratch / f"mem-{copies}x")
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                MEASURE_DRIVER.format(repo=str(REPO)),
                "--input",
                str(corpus),
                "--output",
                str(scratch / f"mem-out-{copies}x"),
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
        )
        line = next((l for l in result.stdout.splitlines() if l.startswith("BENCH")), None)
        if line is None:
            raise RuntimeError(f"{copies}x failed: {result.stderr[-2000:]}")
        _, code, maxrss_kib, seconds, rss_kib = line.split()
        documents = sum(1 for p in corpus.rglob("*") if p.suffix in (".pdf", ".txt", ".md"))
        out[f"{copies}x"] = {
            "documents": documents,
            "peak_driver_rss_mib": round(int(maxrss_kib) / 1024, 1),
            "driver_rss_at_end_mib": round(int(rss_kib) / 1024, 1),
            "seconds": round(float(seconds), 1),
            "exit": int(code),
        }
        print(copies, out[f"{copies}x"], flush=True)
        shutil.rmtree(corpus)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--copies", type=int, default=10, help="demo corpus copies for the throughput runs")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--memory", default="1,10,100", help="corpus sizes (copies) for the driver-memory runs; '' skips")
    p.add_argument("--skip-throughput", action="store_true")
    a = p.parse_args()
    results = {"machine": f"{os.cpu_count()} CPUs", "started": time.strftime("%Y-%m-%d %H:%M")}
    with tempfile.TemporaryDirectory(prefix="docembed-bench-") as tmp:
        scratch = Path(tmp)
        if not a.skip_throughput:
            results["throughput"] = throughput(corpus_copies(SAMPLES, a.copies, scratch / "corpus"), a.repeats, scratch)
            results["throughput"]["copies"] = a.copies
        if a.memory:
            results["driver_memory"] = driver_memory([int(x) for x in a.memory.split(",")], scratch)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
