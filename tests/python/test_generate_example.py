"""examples/generate.py runs end to end on the CPU with a tiny model, on a contiguous and a
paged KV cache (a smoke test: the GPU run with the default sizes is the real comparison).
Skipped without torch."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "generate.py"
PACKAGE = Path(__file__).resolve().parents[2] / "python"


@pytest.mark.parametrize("cache", [[], ["--paged", "--page-size", "4"]],
                         ids=["contiguous", "paged4"])
def test_generate_runs_on_the_cpu_and_agrees_with_torch_sdpa(cache):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE), env.get("PYTHONPATH")]))
    # Two layers: the second layer's keys come from the first layer's attention, so a wrong
    # prefill shows in the decode steps' logits.
    tiny = ["--device", "cpu", "--train-steps", "2", "--layers", "2", "--d-model", "32",
            "--heads", "2", "--context", "48", "--batch", "4", "--prompt-lengths", "3", "30",
            "--new-tokens", "12", "--warmup", "1", "--repeats", "2", "--corpus-bytes", "60000"]
    done = subprocess.run([sys.executable, str(SCRIPT), *tiny, *cache], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for way in ("flashattn", "torch SDPA, padded"):
        assert any(line.startswith(way) and ")" in line for line in lines), way
    assert any(line.startswith("tokens, flashattn vs torch SDPA: 48 of 48 identical")
               for line in lines)
    assert any(line.startswith("logits, flashattn vs torch SDPA:") for line in lines)
    assert any(line.startswith("speed, flashattn over torch SDPA: prefill") for line in lines)
    # fp32 on the CPU: every token the same, the logits within 1e-4 of their scale.
    assert "same tokens as torch SDPA, logits within 1e-4: yes (fp32: required)" in lines
