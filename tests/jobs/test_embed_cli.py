"""`jobs/embed.py` as a user runs it: bad arguments get one clear line and a non-zero exit."""

import json
import shutil
import subprocess
import sys

import ml_dtypes  # noqa: F401  registers bfloat16 with numpy: the fixtures' weights
import pytest
from safetensors.numpy import load_file, save_file

from support import REPO, SAMPLES

EMBED = [sys.executable, str(REPO / "jobs" / "embed.py")]


def run_cli(*args, timeout=300):
    return subprocess.run(EMBED + list(args), capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.fixture
def not_a_dir(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    return blocker


@pytest.mark.parametrize(
    "args, message",
    [
        (["--input", "/nonexistent/docs", "--output", "{tmp}/out"], "input /nonexistent/docs does not exist"),
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--model", "{tmp}"], "has no model.safetensors"),
        (["--input", str(SAMPLES), "--output", "{blocker}/out"], "is not writable"),
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--overlap", "300"], "--overlap must be in"),
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--max-tokens", "1000"],
         "--max-tokens 1000: a window of 1000 tokens is longer than this bert model's 512 positions"),
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--batch-size", "0"], "batch size must be at least 1"),
        (["--input", str(SAMPLES), "--output", "{tmp}/out", "--attention", "magic"], "unknown attention"),
        (["--input", "{tmp}", "--output", "{tmp}/out"], "no documents"),
    ],
)
def test_user_errors_are_one_line(tmp_path, not_a_dir, args, message):
    args = [a.format(tmp=tmp_path, blocker=not_a_dir) for a in args]
    result = run_cli(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("docembed: error:"), result.stderr
    assert message in lines[0]
    assert not (tmp_path / "out" / "_SUCCESS").exists()


def test_missing_required_argument_is_argparse_usage():
    result = run_cli("--input", str(SAMPLES))
    assert result.returncode == 2
    assert "--output" in result.stderr and "Traceback" not in result.stderr


def test_demo_corpus_end_to_end(tmp_path):
    result = run_cli("--input", str(SAMPLES), "--output", str(tmp_path / "out"), "--overlap", "16", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "9 inputs (1 skipped): 8 embedded, 1 failed" in result.stdout
    assert (tmp_path / "out" / "_SUCCESS").exists()
    again = run_cli("--input", str(SAMPLES), "--output", str(tmp_path / "out"))
    assert again.returncode == 0 and "nothing to do" in again.stdout
    search = subprocess.run([sys.executable, str(REPO / "jobs" / "search.py"), "--output", str(tmp_path / "out"),
                             "--query", "photosynthesis", "--top", "2"], capture_output=True, text=True, timeout=300)
    assert search.returncode == 0, search.stderr[-2000:]
    assert search.stdout.startswith("top 2 chunks for: 'photosynthesis'") and "2. score" in search.stdout


FAMILIES = REPO / "tests" / "fixtures" / "families"


def _config_change(change):
    def breakage(path):
        config = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps(config | change))
    return breakage


def _drop_tensor(name):
    def breakage(path):
        tensors = load_file(path / "model.safetensors")
        del tensors[name]
        save_file(tensors, str(path / "model.safetensors"))
    return breakage


@pytest.mark.parametrize(
    "fixture, breakage, extra, message",
    [
        ("gte-new-ntk", _config_change({"model_type": "t5"}), [],
         "model_type 't5' (architectures ['NewModel']) is not supported; supported model_types: bert,"),
        ("gte-new-ntk", _drop_tensor("new.encoder.layer.1.mlp.up_gate_proj.weight"), [],
         "the weights lack tensor 'encoder.layer.1.mlp.up_gate_proj.weight', which a gte model"),
        ("modernbert-layer-types", _config_change({"intermediate_size": 32}), [],
         "tensor 'layers.0.mlp.Wi.weight' has shape (128, 48), but config.json"),
        ("xlm-roberta-sharded", None, ["--max-tokens", "2048"],
         "--max-tokens 2048: a window of 2048 tokens is longer than this xlm-roberta model's 128 positions"),
    ],
)
def test_bad_models_are_one_line(tmp_path, fixture, breakage, extra, message):
    model = tmp_path / fixture
    shutil.copytree(FAMILIES / fixture, model)
    if breakage:
        breakage(model)
    result = run_cli("--input", str(SAMPLES), "--output", str(tmp_path / "out"), "--model", str(model), *extra)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("docembed: error:"), result.stderr
    assert message in lines[0], lines[0]
    assert not (tmp_path / "out").exists()
