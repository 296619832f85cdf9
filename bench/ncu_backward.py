"""An ncu target: the Hopper backward (cuda_wgmma) beside cuDNN's, through PyTorch's SDPA, on
the same inputs: (batch, seqlen, heads, head_dim) bf16 tensors, our backward on our forward's
out and lse, then cuDNN's forward and backward, each twice (docs/perf/cuda_wgmma_backward.md,
v16). Run as

    FLASHATTN_LIBRARY=build/libflashattn.so PYTHONPATH=python:bench ncu \\
        -k regex:'backward_kernel|bprop' --section SpeedOfLight --section ComputeWorkloadAnalysis \\
        --section WarpStateStats python3 bench/ncu_backward.py [--shape 4,4096,16,128] [--causal]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashattn import _torch_op


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="4,4096,16,128", help="batch,seqlen,heads,head_dim")
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args()
    batch, seqlen, heads, head_dim = (int(x) for x in args.shape.split(","))
    q, k, v, dout = (torch.randn(batch, seqlen, heads, head_dim, device="cuda",
                                 dtype=torch.bfloat16) for _ in range(4))
    out, lse = _torch_op.run(q, k, v, args.causal, "top_left", None, "cuda_wgmma", True)
    for _ in range(2):
        _torch_op.run_backward(dout, q, k, v, out, lse, args.causal, "top_left", None,
                               "cuda_wgmma", False)
    # PyTorch's SDPA takes (batch, heads, seqlen, head_dim).
    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for _ in range(2):
            F.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal).backward(
                dout.transpose(1, 2))
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
