"""The backward's deterministic mode against its default, per backend: the time of
flashattn.attention_backward with deterministic=True over the time without, on the same
inputs in one process, for a few shapes of the paper grid (bf16, 1024-16384 keys, d 64, 128
and 256, causal and not). With --builds, the same backend of other builds of the library is
timed beside this one (an A/B of kernel versions).

    python3 bench/deterministic.py [--backends cuda_wgmma,cuda_mma] [--builds NAME=PATH]
"""
import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import implementations  # noqa: E402
import timing  # noqa: E402
from flashattn import _library, _torch_op  # noqa: E402

# (batch, seqlen, heads, head_dim, causal): 16384 tokens, heads × head_dim = 2048.
SHAPES = [(16, 1024, 32, 64, False), (4, 4096, 32, 64, True), (1, 16384, 32, 64, False),
          (16, 1024, 16, 128, True), (4, 4096, 16, 128, False), (4, 4096, 16, 128, True),
          (1, 16384, 16, 128, True), (16, 1024, 8, 256, False), (4, 4096, 8, 256, True),
          (1, 16384, 8, 256, False)]
BUDGET = timing.Budget(300, 5, 50, 3000)
ROUNDS = 3  # alternating default and deterministic calls, medians over the rounds


def backward_calls(backend, lib, tensors, causal):
    """The backend's backward in that library, default and deterministic, on its own
    forward's out and lse (one forward for both)."""
    q, k, v, dout = tensors
    out, lse = _torch_op.run(q, k, v, causal, "top_left", None, backend, True, lib=lib)
    return [lambda _, det=det: _torch_op.run_backward(dout, q, k, v, out, lse, causal, "top_left",
                                                      None, backend, det, lib=lib)
            for det in (False, True)]


def median_ms(call):
    _, estimate = timing.timed_once(lambda: call(0))
    times, _, _ = timing.time_calls(call, 1, BUDGET, estimate)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="cuda_wgmma")
    parser.add_argument("--builds", default="")
    args = parser.parse_args()
    libs = dict({"this": None}, **{name: _library.load(path) for name, path in
                                   implementations.parse_builds(args.builds).items()})
    print(f"{torch.cuda.get_device_name()}; backward time deterministic / default, "
          f"bf16, medians of {ROUNDS} rounds")
    print(f"{'shape':34s}" + "".join(f" {f'{b}@{name}':>28s}" for b in args.backends.split(",")
                                     for name in libs))
    for b, n, h, d, causal in SHAPES:
        tensors = [torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
        label = f"B{b} N{n} H{h} d{d}{' causal' if causal else ''}"
        cells = []
        for backend in args.backends.split(","):
            for lib in libs.values():
                calls = backward_calls(backend, lib, tensors, causal)
                rounds = [[median_ms(call) for call in calls] for _ in range(ROUNDS)]
                default, det = (statistics.median(r[i] for r in rounds) for i in (0, 1))
                cells.append(f"{default:.3f} -> {det:.3f} ms {det / default:.2f}x")
        print(f"{label:34s}" + "".join(f" {c:>28s}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
