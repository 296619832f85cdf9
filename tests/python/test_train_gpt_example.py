"""examples/train_gpt.py runs end to end on the CPU with a tiny model (a smoke test: the GPU
run with the default sizes is the real comparison). Skipped without torch."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "train_gpt.py"
PACKAGE = Path(__file__).resolve().parents[2] / "python"


def test_train_gpt_runs_on_the_cpu_and_compares_the_runs():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE), env.get("PYTHONPATH")]))
    tiny = ["--device", "cpu", "--steps", "6", "--layers", "1", "--d-model", "32", "--heads",
            "2", "--context", "32", "--batch", "4", "--corpus-bytes", "60000",
            "--eval-batches", "2"]
    done = subprocess.run([sys.executable, str(SCRIPT), *tiny], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for run in ("flashattn.sdpa", "torch SDPA", "torch SDPA, seed + 1"):
        assert any(line.startswith(run) and "ms/step" in line for line in lines), run
    # Same weights, same batches, fp32 on the CPU: the two attentions train alike.
    assert "loss curves agree within the noise: yes" in lines
