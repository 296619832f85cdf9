"""examples/transformer_block.py runs end to end on the CPU with small sizes (a smoke test: the
GPU run with the default sizes is the real comparison) and prints each time with its spread.
Skipped without torch."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "transformer_block.py"
PACKAGE = Path(__file__).resolve().parents[2] / "python"
SPREAD = r"\d+\.\d+ \(\d+\.\d+-\d+\.\d+\)"  # median (min-max)


def run_example(*args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True,
                          text=True, timeout=120)


def test_transformer_block_prints_medians_with_their_range_and_agrees_with_torch():
    done = run_example("--device", "cpu", "--seqlen", "32", "--d-model", "64", "--heads", "2",
                       "--iters", "1", "--rounds", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "ms per call, median (min-max) over 3 rounds of 1 calls, wall time" in lines
    for name in ("torch sdpa", "flashattn.sdpa"):
        row = rf"{re.escape(name)}\s+{SPREAD}\s+{SPREAD}"
        assert any(re.fullmatch(row, line) for line in lines), name
    ratio = r"\d+\.\d+x \(\d+\.\d+-\d+\.\d+\)"
    assert any(re.fullmatch(rf"speed-up\s+{ratio}\s+{ratio}\s+torch's time / flashattn's, "
                            rf"per round", line) for line in lines)
    # The host-time table is CUDA's: on the CPU the host does the work the wall time shows.
    assert not any(line.startswith("host ms") for line in lines)
    assert "OK: same output as torch's SDPA" in lines


def test_cuda_events_need_a_cuda_device():
    done = run_example("--device", "cpu", "--timer", "events")
    assert done.returncode != 0
    assert "--timer events needs a CUDA device" in done.stderr
