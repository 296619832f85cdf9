"""An ncu target: the Hopper forward (cuda_wgmma) at 4 × 4096 tokens, 16 heads, head_dim 128,
bf16, plain, with dropout 0.1, softcap 30 and ALiBi, one call each in that order
(docs/perf/variants.md, v11). Run as

    FLASHATTN_LIBRARY=build/libflashattn.so PYTHONPATH=python ncu --target-processes all \\
        -k regex:forward_kernel --section SpeedOfLight --section ComputeWorkloadAnalysis \\
        --section InstructionStats python3 bench/ncu_variants.py
"""
import torch

import flashattn


def main():
    q, k, v = (torch.randn(4, 4096, 16, 128, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    slopes = torch.exp2(-8.0 * torch.arange(1, 17, device="cuda") / 16)
    for options in ({}, dict(dropout_p=0.1, dropout_seed=1), dict(softcap=30.0),
                    dict(alibi_slopes=slopes)):
        flashattn.attention(q, k, v, backend="cuda_wgmma", **options)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
