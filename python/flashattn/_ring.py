"""One rank's share of ring attention, step by step, whatever carries the blocks around.

Each rank holds its local queries and, at ring step s, the K/V block of rank (r - s) mod W
(see _zigzag for the layout and which part of the local problem each step computes).
- Forward: each step's block gives a partial output and lse over the keys it saw; the
  partials merge by their lse in fp32 (the online softmax's rescaling, one block at a time),
  so the result is the softmax over all of the sequence's keys.
- Backward: every step recomputes its block's probabilities from the merged lse and output
  (flashattn.attention_backward with the final out and lse: exactly the terms of the whole
  problem's gradient that involve this block's keys). dq sums over the steps on the rank;
  dk and dv of a block sum over the ranks it visits, in an fp32 accumulator that travels
  with it.

ForwardRank and BackwardRank do one rank's arithmetic; the transport is the caller's: the
torch.distributed ring in _ring_attention, or `simulate`/`simulate_backward` below, which run
every rank in one process (ranks as loop iterations), the test of the arithmetic.
"""
from typing import NamedTuple, Optional

import torch

from . import _attention, _zigzag


class Options(NamedTuple):
    """The attention options every step passes on."""
    causal: bool
    scale: Optional[float]
    backend: Optional[str]
    deterministic: bool


def merge(out, lse, block_out, block_lse):
    """Folds a partial result over more keys into (out, lse), in place.

    out: fp32 (batch, rows, heads, head_dim) and lse: fp32 (batch, heads, rows), the softmax
    over the keys seen so far; block_out, block_lse the same over a disjoint set of keys. The
    merged lse is log(e^lse + e^block_lse) and each output is weighted by its share of it.
    A row that saw no key in either keeps output 0 and lse -inf; NaN propagates."""
    merged = torch.logaddexp(lse, block_lse)
    empty = merged == float("-inf")
    weight = torch.where(empty, 0.0, torch.exp(lse - merged))
    block_weight = torch.where(empty, 0.0, torch.exp(block_lse - merged))
    out.mul_(weight.transpose(1, 2).unsqueeze(-1))
    out.addcmul_(block_out, block_weight.transpose(1, 2).unsqueeze(-1))
    lse.copy_(merged)


class ForwardRank:
    """One rank's forward: its local queries against each K/V block the ring brings."""

    def __init__(self, q, rank, world_size, options):
        self.q, self.rank, self.world_size, self.options = q, rank, world_size, options
        self.out = None  # fp32 (batch, local_seqlen, heads_q, head_dim)
        self.lse = None  # fp32 (batch, heads_q, local_seqlen)

    def step(self, step, k, v):
        """Attends to the K/V block of ring step `step` (that of rank rank - step)."""
        source = (self.rank - step) % self.world_size
        b = _zigzag.block(self.rank, source, self.q.shape[1], self.options.causal)
        out, lse = _attention.attention(
            self.q[:, b.rows], k[:, b.keys], v[:, b.keys], causal=b.causal,
            scale=self.options.scale, backend=self.options.backend, return_lse=True)
        if self.out is None:  # step 0, the rank's own block: every local row
            self.out, self.lse = out.float(), lse
        else:
            merge(self.out[:, b.rows], self.lse[:, :, b.rows], out, lse)

    def result(self):
        """(out in q's dtype, lse fp32) over every key of the sequence."""
        return self.out.to(self.q.dtype), self.lse


class BackwardRank:
    """One rank's backward: its part of the gradients for each K/V block the ring brings."""

    def __init__(self, q, out, lse, dout, rank, world_size, options):
        self.q, self.out, self.lse, self.dout = q, out, lse, dout
        self.rank, self.world_size, self.options = rank, world_size, options
        self.dq = None  # fp32, from the first step's block (every local row)

    def block_gradients(self, step, k, v):
        """(dk, dv) of the keys that ring step `step`'s block computes on (its Block's
        `keys`, see _zigzag), with this rank's dq part added to its own; returns them with
        the Block, for `accumulate`."""
        source = (self.rank - step) % self.world_size
        b = _zigzag.block(self.rank, source, self.q.shape[1], self.options.causal)
        rows = b.rows
        dq, dk, dv = _attention.attention_backward(
            self.q[:, rows], k[:, b.keys], v[:, b.keys], self.out[:, rows],
            self.dout[:, rows], self.lse[:, :, rows], causal=b.causal,
            scale=self.options.scale, backend=self.options.backend,
            deterministic=self.options.deterministic)
        if self.dq is None:
            self.dq = dq.float()
        else:
            self.dq[:, rows] += dq
        return b, dk, dv

    @staticmethod
    def accumulate(dkv, block, dk, dv, first):
        """Adds a rank's (dk, dv) for `block` into the block's travelling fp32 accumulator
        dkv, (2, batch, local_seqlen, heads_kv, head_dim); `first`: the block's first
        step (at its owner, every key), which sets the accumulator instead."""
        if first:
            dkv[0].copy_(dk)
            dkv[1].copy_(dv)
        else:
            dkv[0][:, block.keys] += dk
            dkv[1][:, block.keys] += dv


def gradient_buffer(k):
    """An fp32 accumulator for the (dk, dv) of a K/V block shaped like k."""
    return torch.empty((2, *k.shape), dtype=torch.float32, device=k.device)


def simulate(qs, ks, vs, options):
    """Every rank's (out, lse) of ring attention over local parts qs[r], ks[r], vs[r], run in
    one process: each step, every rank computes, then every block moves to the next rank."""
    world_size = len(qs)
    ranks = [ForwardRank(q, r, world_size, options) for r, q in enumerate(qs)]
    blocks = list(zip(ks, vs))
    for step in range(world_size):
        for rank, (k, v) in zip(ranks, blocks):
            rank.step(step, k, v)
        blocks = blocks[-1:] + blocks[:-1]  # rank r receives rank r - 1's block
    return [rank.result() for rank in ranks]


def simulate_backward(qs, ks, vs, outs, lses, douts, options):
    """Every rank's (dq, dk, dv) of ring attention, in one process, as `simulate`; the
    gradient accumulators travel with their blocks and reach their owners after the last
    step."""
    world_size = len(qs)
    ranks = [BackwardRank(q, out, lse, dout, r, world_size, options)
             for r, (q, out, lse, dout) in enumerate(zip(qs, outs, lses, douts))]
    blocks = list(zip(ks, vs))
    accumulators = [gradient_buffer(k) for k in ks]
    for step in range(world_size):
        for rank, (k, v), dkv in zip(ranks, blocks, accumulators):
            rank.accumulate(dkv, *rank.block_gradients(step, k, v), first=step == 0)
        blocks = blocks[-1:] + blocks[:-1]
        accumulators = accumulators[-1:] + accumulators[:-1]
    return [(rank.dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(k.dtype))
            for rank, q, k, dkv in zip(ranks, qs, ks, accumulators)]
