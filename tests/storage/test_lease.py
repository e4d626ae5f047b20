"""A run's lease on an object-store output (pipeline.output.lease), on moto's S3 server and the GCS emulator:
a live holder refuses a second run, a dead one's lease is taken over, two claims at once leave one holder, and
a run whose lease was taken, or could not be renewed, stops at its next commit.

The holders here renew every 0.4 s instead of every 10 s, so that a lease lapses in 1.2 s.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from pipeline.errors import OutputError, StorageError
from pipeline.io import filesystems
from pipeline.io.filesystems import filesystem_for
from pipeline.output.layout import LEASE_FILE
from pipeline.output.lease import LeaseTiming
from pipeline.output.resume import held_alone

from support import REPO, SAMPLES

FAST = LeaseTiming(beat_s=0.4, missed_beats=3, settle_s=0.3)
BUCKET = "leases"
HOLD = f"""
import sys, time
from pipeline.output.lease import LeaseTiming
from pipeline.output.resume import held_alone
with held_alone(sys.argv[1], LeaseTiming({FAST.beat_s}, {FAST.missed_beats}, {FAST.settle_s})):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture(scope="module")
def bucket(servers):
    for scheme in ("s3", "gs"):
        servers.make_bucket(scheme, BUCKET)


@pytest.fixture(params=["s3", "gs"])
def output(request, bucket, servers, tmp_path, monkeypatch):
    for name, value in servers.env(tmp_path).items():
        monkeypatch.setenv(name, value)
    servers.reset_faults()
    return f"{request.param}://{BUCKET}/{request.node.name.split('[')[0]}"


def lease_of(output: str) -> dict | None:
    fs, root = filesystem_for(output)
    try:
        return json.loads(filesystems.read_file(fs, f"{root}/{LEASE_FILE}"))
    except FileNotFoundError:
        return None


def put_lease(output: str, **lease) -> None:
    fs, root = filesystem_for(output)
    filesystems.put_small(fs, f"{root}/{LEASE_FILE}", json.dumps(lease).encode())


def holding(output: str) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, output], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    return holder


def test_a_live_holder_refuses_a_second_run_and_its_killed_process_frees_the_output_at_once(output):
    holder = holding(output)
    try:
        held = lease_of(output)
        assert held["pid"] == holder.pid and held["host"] == socket.gethostname()
        started = time.monotonic()
        with pytest.raises(OutputError, match=rf"is being written by another run \(on .*, process {holder.pid}, "):
            with held_alone(output, FAST):
                pass
        assert time.monotonic() - started < FAST.lapse_s  # refused once it saw a renewal, not at the lapse
    finally:
        holder.kill()
        holder.wait()
    started = time.monotonic()
    with held_alone(output, FAST):  # a process of this host that is gone holds nothing
        assert lease_of(output)["pid"] == os.getpid()
    assert time.monotonic() - started < FAST.lapse_s
    assert lease_of(output) is None  # released


def test_another_hosts_lease_is_taken_over_once_it_lapses_and_one_renewed_meanwhile_refuses(output, caplog):
    put_lease(output, run="r1", host="elsewhere", pid=1, since="2026-01-01T00:00:00+00:00", beat=0)
    started = time.monotonic()
    with caplog.at_level("INFO", logger="docembed"), held_alone(output, FAST):
        assert time.monotonic() - started >= FAST.lapse_s
    assert "taking over" in caplog.text and "on elsewhere, process 1" in caplog.text

    put_lease(output, run="r2", host="elsewhere", pid=1, since="2026-01-01T00:00:00+00:00", beat=0)
    # The other run renews every beat for as long as the watch may look, as a live run does: one renewal at the
    # first beat could land before the watch's first read, on cores busy with the other worker's jobs, and
    # then the watch saw no renewal at all. Watching for 4 s, not 1.2: a write to moto's server sharing those
    # cores once took past a 1.2 s lapse. The refusal comes as soon as the watch sees a renewal.
    stop = threading.Event()

    def renew():
        for beat in itertools.count(1):
            if stop.wait(FAST.beat_s):
                return
            put_lease(output, run="r2", host="elsewhere", pid=1, since="2026-01-01T00:00:00+00:00", beat=beat)

    renewing = threading.Thread(target=renew)
    renewing.start()
    patient = dataclasses.replace(FAST, missed_beats=10)
    try:
        with pytest.raises(OutputError, match=r"another run \(on elsewhere, process 1,"):
            with held_alone(output, patient):
                pass
    finally:
        stop.set()
        renewing.join()
    assert lease_of(output)["run"] == "r2"  # a refused run leaves the holder's lease alone


def test_two_runs_claiming_at_once_leave_one_holder(output):
    start = threading.Barrier(2)
    outcomes: list[str] = []

    def claim():
        start.wait()
        try:
            with held_alone(output, FAST):
                outcomes.append("held")
                time.sleep(3 * FAST.beat_s)
        except OutputError as e:
            outcomes.append(str(e))

    runs = [threading.Thread(target=claim) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert sorted(outcomes)[0] == "held" and "is being written by another run" in sorted(outcomes)[1], outcomes


def test_a_run_whose_lease_another_run_took_stops_at_its_next_check(output):
    with held_alone(output, FAST) as still_held:
        still_held()
        put_lease(output, run="thief", host="elsewhere", pid=7, since="2026-01-01T00:00:00+00:00", beat=0)
        time.sleep(2.5 * FAST.beat_s)
        with pytest.raises(OutputError, match=r"\(on elsewhere, process 7, .*\) took it over: this run stops"):
            still_held()
    assert lease_of(output)["run"] == "thief"  # the other run's lease is not released by this one


def test_a_run_whose_renewals_fail_stops_once_its_lease_could_have_lapsed(output, monkeypatch):
    with held_alone(output, FAST) as still_held:
        with monkeypatch.context() as patched:
            patched.setattr(filesystems, "put_small", storage_down)
            time.sleep(FAST.beat_s * 1.5)
            still_held()  # a renewal failed, but the lease has not lapsed yet
            time.sleep(FAST.lapse_s)
            with pytest.raises(OutputError, match=r"could not renew its lease for 1 s, so another may take it: this"):
                still_held()
    assert lease_of(output) is None  # released all the same


def test_a_renewal_failing_otherwise_than_storage_stops_the_run_at_once(output, monkeypatch):
    with held_alone(output, FAST) as still_held, monkeypatch.context() as patched:
        patched.setattr(filesystems, "put_small", lambda *a: 1 / 0)
        time.sleep(FAST.beat_s * 1.5)
        with pytest.raises(OutputError, match=r"renewing its lease failed \(ZeroDivisionError: division by zero\)"):
            still_held()


def test_a_run_ended_by_storage_leaves_its_lease_to_lapse_and_this_hosts_next_run_takes_it_at_once(output):
    with pytest.raises(StorageError), held_alone(output, FAST):
        raise StorageError("cannot write: still failing after 3 attempts")  # a delete would wait out the retries
    assert lease_of(output)["pid"] == os.getpid()
    started = time.monotonic()
    with held_alone(output, FAST):
        pass
    assert time.monotonic() - started < FAST.lapse_s and lease_of(output) is None


def storage_down(*args):
    raise StorageError("cannot write: still failing after 3 attempts")


def test_the_cli_is_refused_in_two_lines_while_another_process_holds_an_object_store_output(output, servers, tmp_path):
    holder = holding(output)
    try:
        run = subprocess.run(
            [sys.executable, "jobs/embed.py", "--input", str(SAMPLES), "--output", output],
            cwd=REPO,
            env={**os.environ, **servers.env(tmp_path)},
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        holder.kill()
        holder.wait()
    notice, error = run.stderr.splitlines()  # what it waited for, and why it was refused
    assert run.returncode == 2 and "holds the lease of another run" in notice, run.stderr[-3000:]
    assert error.startswith("docembed: error: output ")
    assert f"is being written by another run (on {socket.gethostname()}, process {holder.pid}," in error
    fs, root = filesystem_for(output)
    assert [i.path for i in filesystems.list_files(fs, root)] == [f"{root}/{LEASE_FILE}"]  # refused before writing
