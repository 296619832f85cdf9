"""flashattn.ring_attention over a real torch.distributed group: 2 and 3 processes on the
CPU (gloo), through autograd, dense and packed batches and a v of its own head_dim,
bit-equal to the simulated ring of test_ring.py; mismatched
parts raise the same clear error on every rank instead of hanging. Skipped without torch or
torch.distributed."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

SCRIPT = Path(__file__).resolve().parent / "ring_gloo.py"
PACKAGE = Path(__file__).resolve().parents[2] / "python"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("world_size", [2, 3])
def test_ring_over_gloo_equals_the_simulated_ring_and_rejects_bad_parts(world_size):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, str(SCRIPT), str(world_size), str(free_port())],
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    reports = sorted((json.loads(line) for line in done.stdout.splitlines()),
                     key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == list(range(world_size))
    for r in reports:
        assert r["equal_to_simulated_causal"] and r["equal_to_simulated_full"], r
        assert r["head_dim_v_equal_to_simulated"], r
        assert r["packed_equal_to_simulated"], r
        assert r["packed_bad_length"] == (
            f"InvalidArgumentError: cu_seqlens: sequence 0 has length {6 * world_size + 1}, "
            f"must be a multiple of 2·world_size = {2 * world_size} (the zigzag layout cuts "
            f"each sequence into 2·world_size equal chunks)")
        assert r["uneven"] == (
            "InvalidArgumentError: k: shape is (2, 4, 2, 16) on rank 1 and (2, 2, 2, 16) on "
            "rank 0, must be the same on every rank of the group (the ring passes k and v "
            "from rank to rank)")
        assert r["head_dim_v_differs"] == (
            "InvalidArgumentError: v: head_dim is 8 on rank 1 and 16 on rank 0, must be the "
            "same on every rank of the group (the ring passes k and v from rank to rank)")
        if r["rank"] == world_size - 1:
            assert r["odd"].startswith("InvalidArgumentError: q: local seqlen is 3, must be "
                                       "even with causal")
        else:
            assert r["odd"].startswith(f"InvalidArgumentError: group: rank {world_size - 1} "
                                       f"rejected its part (InvalidArgumentError: q: local "
                                       f"seqlen is 3")
