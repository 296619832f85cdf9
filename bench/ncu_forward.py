"""An ncu target: the Hopper forward (cuda_wgmma) or cuDNN's, through PyTorch's SDPA, on the
same (batch, seqlen, heads, head_dim) inputs, three calls inside the CUDA profiler's range so
that `--profile-from-start off --launch-skip 2 --launch-count 1` profiles the third alone, warm
(docs/perf/model_shapes.md: the short layers at c4ab761). Run once for each, as

    FLASHATTN_LIBRARY=build/libflashattn.so PYTHONPATH=python ncu --profile-from-start off \\
        -k regex:forward_kernel --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section WarpStateStats \\
        --section InstructionStats --section SourceCounters -o ours \\
        python3 bench/ncu_forward.py ours [--shape 256,128,12,64] [--dtype f16] [--causal]

and `cudnn` in place of `ours` (without the kernel filter: cuDNN's is one kernel a call).
`ncu --import ours.ncu-rep --page source --print-source sass --csv` then feeds
bench/ncu_sass_summary.py; `--print-source cuda,sass` puts each instruction under its source
line, which names the barrier an mbarrier retry loop polls.
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("who", choices=("ours", "cudnn"))
    parser.add_argument("--shape", default="256,128,12,64", help="batch,seqlen,heads,head_dim")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f16")
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args()
    batch, seqlen, heads, head_dim = (int(x) for x in args.shape.split(","))
    q, k, v = (torch.randn(batch, seqlen, heads, head_dim, device="cuda",
                           dtype=DTYPES[args.dtype]) for _ in range(3))
    # PyTorch's SDPA takes (batch, heads, seqlen, head_dim).
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for _ in range(3):
        if args.who == "ours":
            flashattn.attention(q, k, v, causal=args.causal, backend="cuda_wgmma")
        else:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
