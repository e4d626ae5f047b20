"""bench/accel.sh: its CPU dry run writes every table; without an accelerator it refuses in one line.

The accelerator path itself needs a GPU or TPU host (`make bench-accel`); here the
same steps run through `--cpu` at small sizes with the existing .venv.
"""

import os
import subprocess

import pytest

from support import REPO

SCRIPT = REPO / "bench" / "accel.sh"


def test_without_an_accelerator_it_says_so_and_exits_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPU_")} | {"PATH": "/usr/bin:/bin"}
    if (
        subprocess.run(
            ["sh", "-c", "command -v nvidia-smi || ls /dev/accel0 /dev/vfio/0"], env=env, capture_output=True
        ).returncode
        == 0
    ):
        pytest.skip("this host has an accelerator")
    result = subprocess.run([str(SCRIPT), "--out", str(tmp_path / "t.md")], env=env, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "bench/accel.sh: no GPU (nvidia-smi) or TPU found on this host; --cpu for the dry run"
    )
    assert not (tmp_path / "t.md").exists()


@pytest.mark.integration
def test_the_cpu_dry_run_writes_the_three_tables(tmp_path):
    out = tmp_path / "accel.md"
    result = subprocess.run([str(SCRIPT), "--cpu", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, out.read_text()[-3000:] if out.exists() else result.stderr
    text = out.read_text()
    assert text.startswith("# bench/accel.sh (cpu), ")
    assert "FAILED" not in text
    for section, table_head in [
        ("## kernel contract tests", " passed"),
        ("## attention implementations", "| impl | head_dim | seq |"),
        ("## encoder families", "| family | dtype | window 512 |"),
        ("## encoder families", "## bfloat16 / float32, tokens/s per round"),
    ]:
        assert section in text and table_head in text.split(section, 1)[1], section
