"""A model of ring attention's time (flashattn.ring_attention, causal, zigzag layout), from
measured pieces: the kernels' time per ring-step block (bench/ring.py simulate's
block_sweep) and the link bandwidth between neighbouring ranks. It predicts the scaling
efficiency (one GPU's time for the whole problem over W times the ring's time) for any
number of GPUs W and sequence length N, and says where the transfers stop hiding behind the
computation. docs/context-parallel.md derives it and gives its predictions beside the
measurements.

Per rank, local length L = N/W. Each of the W steps of a pass computes one block of L·L/2
(query, key) pairs (the zigzag layout makes the diagonal and off-diagonal steps alike) and,
except after the last, moves a block to the next rank: the forward moves K and V (2·L·Hkv·d
elements of the input dtype), the backward K and V and their fp32 gradient accumulator
(2·L·Hkv·d·4 bytes more). A step takes the longer of its computation C and its transfer X,
plus the part `exposed` of the transfer that does not run beside the computation (0: hidden
completely; 1: serialised):

    step = max(C, X) + exposed·min(C, X)

C is the block's kernel time (interpolated from the sweep) plus the step's elementwise work
(the merge of partial results, the fp32 gradient additions) at the device's memory
bandwidth.

Pure Python, no torch:

    python3 bench/ring_model.py RING_1GPU.json [--nvlink-gb-s 370] [--network-gb-s 45] \
        [--exposed 0.0] [--tokens 131072,1048576] [--gpus 2,8,64,512]
"""
import argparse
import bisect
import json
import math
from dataclasses import dataclass
from pathlib import Path

ITEM_BYTES = {"bf16": 2, "f16": 2}
GPUS_PER_NODE = 8  # NVLink inside a node; beyond it the ring crosses the network


@dataclass(frozen=True)
class Shape:
    batch: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str

    def block_bytes(self, local):
        """Bytes of the K/V block a forward step moves."""
        return 2 * self.batch * local * self.kv_heads * self.head_dim * ITEM_BYTES[self.dtype]

    def gradient_bytes(self, local):
        """Bytes of the fp32 (dk, dv) accumulator a backward step moves beside the block."""
        return 2 * self.batch * local * self.kv_heads * self.head_dim * 4

    def merge_bytes(self, local):
        """Bytes the elementwise work of a step reads and writes around its block: the
        forward's merge of the block's output into the fp32 one (read 4 + 2, write 4 bytes
        an element, over the query heads); the backward's additions of dq (query heads) and
        of dk, dv (kv heads, twice) into fp32 (the same 10 bytes an element)."""
        elements = self.batch * local * self.head_dim
        return 10 * elements * self.heads, 10 * elements * (self.heads + 2 * self.kv_heads)


class BlockTimes:
    """Time of one step's block, forward and backward, at any local length: interpolated
    log-log between the measured lengths, beyond the longest at its TFLOP/s (quadratic)."""

    def __init__(self, sweep):
        self.rows = sorted(sweep, key=lambda r: r["local_seqlen"])
        self.lengths = [r["local_seqlen"] for r in self.rows]

    def ms(self, local, key):
        lengths, rows = self.lengths, self.rows
        if local >= lengths[-1]:
            return rows[-1][key] * (local / lengths[-1]) ** 2
        if local <= lengths[0]:
            return rows[0][key]
        i = bisect.bisect_right(lengths, local)
        a, b = rows[i - 1], rows[i]
        t = math.log(local / a["local_seqlen"]) / math.log(b["local_seqlen"] / a["local_seqlen"])
        return math.exp((1 - t) * math.log(a[key]) + t * math.log(b[key]))


def step_ms(compute_ms, transfer_ms, exposed):
    return max(compute_ms, transfer_ms) + exposed * min(compute_ms, transfer_ms)


def predict(shape, blocks, whole_tflops, tokens, gpus, nvlink_gb_s, network_gb_s, exposed,
            hbm_gb_s):
    """The ring's predicted time per pass and its efficiency for `tokens` over `gpus`."""
    local = tokens / gpus
    link_gb_s = nvlink_gb_s if gpus <= GPUS_PER_NODE else network_gb_s
    fwd_merge, bwd_merge = (b / hbm_gb_s / 1e6 for b in shape.merge_bytes(local))
    fwd_c = blocks.ms(local, "fwd_ms") + fwd_merge
    bwd_c = blocks.ms(local, "bwd_ms") + bwd_merge
    fwd_x = shape.block_bytes(local) / link_gb_s / 1e6
    bwd_x = (shape.block_bytes(local) + shape.gradient_bytes(local)) / link_gb_s / 1e6
    # W steps a pass; W - 1 of them overlap a transfer (the backward's accumulators make
    # one more hop, after its last step, to reach their owners).
    ring_ms = (fwd_c + (gpus - 1) * step_ms(fwd_c, fwd_x, exposed)
               + (gpus - 1) * step_ms(bwd_c, bwd_x, exposed) + step_ms(bwd_c, bwd_x, exposed))
    whole_flops = 3.5 * 4 * shape.batch * shape.heads * tokens * tokens * shape.head_dim / 2
    whole_ms = whole_flops / whole_tflops / 1e9
    return {"tokens": tokens, "gpus": gpus, "local": local, "link_gb_s": link_gb_s,
            "fwd_compute_ms": fwd_c, "fwd_transfer_ms": fwd_x, "bwd_compute_ms": bwd_c,
            "bwd_transfer_ms": bwd_x, "ring_ms": ring_ms, "whole_ms": whole_ms,
            "efficiency": whole_ms / (gpus * ring_ms),
            "hidden": fwd_x <= fwd_c and bwd_x <= bwd_c}


def hiding_threshold(shape, blocks, link_gb_s):
    """The local length from which on both passes' transfers fit under their blocks'
    computation on a link of link_gb_s, the kernels at their full rate (the longest measured
    block's TFLOP/s): a transfer grows as L and a block's work as L², so below this length
    the link sets the pace. (Far below it, at a few thousand tokens, the blocks' launch time
    sets it instead: see the sweep.)"""
    longest = blocks.rows[-1]
    work = 4 * shape.batch * shape.heads * 0.5 * shape.head_dim  # a block's FLOPs over L²
    fwd_rate = work * longest["local_seqlen"] ** 2 / longest["fwd_ms"]  # FLOPs a ms
    bwd_rate = 2.5 * work * longest["local_seqlen"] ** 2 / longest["bwd_ms"]
    per_token = shape.block_bytes(1) / link_gb_s / 1e6  # ms a token of the block takes
    fwd = per_token * fwd_rate / work
    bwd = (per_token + shape.gradient_bytes(1) / link_gb_s / 1e6) * bwd_rate / (2.5 * work)
    return max(fwd, bwd)


def markdown(rows):
    lines = ["| tokens | GPUs | local | link GB/s | fwd step compute / transfer ms | "
             "bwd step compute / transfer ms | ring ms | one GPU ms | efficiency |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['tokens']} | {r['gpus']} | {r['local']:.0f} | {r['link_gb_s']:.0f} | "
            f"{r['fwd_compute_ms']:.3g} / {r['fwd_transfer_ms']:.3g} | "
            f"{r['bwd_compute_ms']:.3g} / {r['bwd_transfer_ms']:.3g} | {r['ring_ms']:.4g} | "
            f"{r['whole_ms']:.4g} | {r['efficiency']:.2f}{'' if r['hidden'] else ' (exposed)'} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("measured", type=Path, help="bench/ring.py simulate's JSON")
    p.add_argument("--nvlink-gb-s", type=float, default=370.0)
    p.add_argument("--network-gb-s", type=float, default=45.0)
    p.add_argument("--exposed", type=float, default=0.0)
    p.add_argument("--hbm-gb-s", type=float, default=2900.0,
                   help="device memory bandwidth, bytes read + written per second")
    p.add_argument("--tokens", default="131072,1048576")
    p.add_argument("--gpus", default="2,8,64,512")
    args = p.parse_args(argv)
    measured = json.loads(args.measured.read_text())
    c = measured["config"]
    shape = Shape(c["batch"], c["heads"], c["kv_heads"], c["head_dim"], c["dtype"])
    blocks = BlockTimes(measured["block_sweep"])
    rows = [predict(shape, blocks, measured["whole"]["tflops"], int(n), int(w),
                    args.nvlink_gb_s, args.network_gb_s, args.exposed, args.hbm_gb_s)
            for n in args.tokens.split(",") for w in args.gpus.split(",")]
    print(markdown(rows))
    for name, gb_s in (("NVLink", args.nvlink_gb_s), ("network", args.network_gb_s)):
        print(f"transfers hide from local length {hiding_threshold(shape, blocks, gb_s):.0f} "
              f"on the {name} ({gb_s:.0f} GB/s)")


if __name__ == "__main__":
    main()
