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
import math
from typing import NamedTuple, Optional

import torch

from . import _attention, _varlen, _zigzag


class Options(NamedTuple):
    """The attention options every step passes on."""
    causal: bool
    scale: Optional[float]
    backend: Optional[str]
    deterministic: bool


def pair(k, v):
    """One contiguous buffer of k's elements then v's: a K/V block as one message whatever
    v's head_dim (for equal shapes the layout of torch.stack((k, v)))."""
    return torch.cat((k.flatten(), v.flatten()))


def unpair(buffer, k_shape, v_shape):
    """(k, v): the two contiguous views of a buffer laid out as pair()'s (a K/V block, or
    its gradient_buffer) for k and v of these shapes."""
    size = math.prod(k_shape)
    return buffer[:size].view(k_shape), buffer[size:].view(v_shape)


def merge(out, lse, block_out, block_lse):
    """Folds a partial result over more keys into (out, lse), in place.

    out: fp32 (batch, rows, heads, head_dim_v) and lse: fp32 (batch, heads, rows), the softmax
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


class Dense:
    """A batch of whole sequences, (batch, local_seqlen, heads, head_dim) parts (v's of its
    own head_dim): one block a step (_zigzag.block), flashattn.attention's calls."""

    @staticmethod
    def blocks(rank, source, local_seqlen, causal):
        return [_zigzag.block(rank, source, local_seqlen, causal)]

    @staticmethod
    def attention(q, k, v, causal, options):
        return _attention.attention(q, k, v, causal=causal, scale=options.scale,
                                    backend=options.backend, return_lse=True)

    @staticmethod
    def backward(q, k, v, out, dout, lse, causal, options):
        return _attention.attention_backward(q, k, v, out, dout, lse, causal=causal,
                                             scale=options.scale, backend=options.backend,
                                             deterministic=options.deterministic)


class Packed:
    """A packed batch of sequences of different lengths, held as (1, local_total, heads,
    head_dim) parts in the zigzag layout of _zigzag.shard_packed: one block per pair of
    halves (_zigzag.packed_blocks), varlen_attention's calls with the halves' prefix sums."""

    def __init__(self, half_prefix_sums, longest_half):
        self.cu, self.longest = half_prefix_sums, longest_half

    @staticmethod
    def blocks(rank, source, local_total, causal):
        return _zigzag.packed_blocks(rank, source, local_total, causal)

    def attention(self, q, k, v, causal, options):
        out, lse = _varlen.varlen_attention(
            q[0], k[0], v[0], self.cu, self.cu, self.longest, self.longest, causal=causal,
            scale=options.scale, backend=options.backend, return_lse=True)
        return out[None], lse[None]

    def backward(self, q, k, v, out, dout, lse, causal, options):
        grads = _varlen.varlen_attention_backward(
            q[0], k[0], v[0], out[0], dout[0], lse[0], self.cu, self.cu, self.longest,
            self.longest, causal=causal, scale=options.scale, backend=options.backend,
            deterministic=options.deterministic)
        return tuple(g[None] for g in grads)


def covers_all(rows, length):
    return rows.start in (None, 0) and rows.stop in (None, length)


class ForwardRank:
    """One rank's forward: its local queries against each K/V block the ring brings. q is
    (batch, local_seqlen, heads_q, head_dim); `layout` Dense or Packed."""

    def __init__(self, q, rank, world_size, options, layout=Dense):
        self.q, self.rank, self.world_size = q, rank, world_size
        self.options, self.layout = options, layout
        self.out = None  # fp32 (batch, local_seqlen, heads_q, head_dim_v)
        self.lse = None  # fp32 (batch, heads_q, local_seqlen)

    def step(self, step, k, v):
        """Attends to the K/V block of ring step `step` (that of rank rank - step)."""
        source = (self.rank - step) % self.world_size
        local = self.q.shape[1]
        for b in self.layout.blocks(self.rank, source, local, self.options.causal):
            out, lse = self.layout.attention(self.q[:, b.rows], k[:, b.keys], v[:, b.keys],
                                             b.causal, self.options)
            if self.out is None and covers_all(b.rows, local):
                self.out, self.lse = out.float(), lse
                continue
            if self.out is None:  # the first block leaves some rows for later ones
                device = self.q.device
                self.out = torch.zeros((*self.q.shape[:3], v.shape[3]), dtype=torch.float32,
                                       device=device)
                self.lse = torch.full((self.q.shape[0], self.q.shape[2], local), float("-inf"),
                                      device=device)
            merge(self.out[:, b.rows], self.lse[:, :, b.rows], out, lse)

    def result(self):
        """(out in q's dtype, lse fp32) over every key of the sequence."""
        return self.out.to(self.q.dtype), self.lse


class BackwardRank:
    """One rank's backward: its part of the gradients for each K/V block the ring brings."""

    def __init__(self, q, out, lse, dout, rank, world_size, options, layout=Dense):
        self.q, self.out, self.lse, self.dout = q, out, lse, dout
        self.rank, self.world_size = rank, world_size
        self.options, self.layout = options, layout
        self.dq = None  # fp32, set by the first block

    def block_gradients(self, step, k, v):
        """The (keys, dk, dv) parts of ring step `step`'s blocks (the keys each computes on,
        see _zigzag), with this rank's dq parts added to its own; for `accumulate`."""
        source = (self.rank - step) % self.world_size
        local = self.q.shape[1]
        parts = []
        for b in self.layout.blocks(self.rank, source, local, self.options.causal):
            rows = b.rows
            dq, dk, dv = self.layout.backward(
                self.q[:, rows], k[:, b.keys], v[:, b.keys], self.out[:, rows],
                self.dout[:, rows], self.lse[:, :, rows].contiguous(), b.causal, self.options)
            if self.dq is None and covers_all(rows, local):
                self.dq = dq.float()
            else:
                if self.dq is None:
                    self.dq = torch.zeros(self.q.shape, dtype=torch.float32,
                                          device=self.q.device)
                self.dq[:, rows] += dq
            parts.append((b.keys, dk, dv))
        return parts

    @staticmethod
    def accumulate(dkv, parts, first):
        """Adds a rank's (keys, dk, dv) parts into the held block's travelling fp32
        accumulator dkv, the (dk, dv) views of a gradient_buffer (k's shape and v's);
        `first`: the block's first step (at its owner), whose parts set the accumulator
        instead."""
        length = dkv[0].shape[1]
        if first and not covers_all(parts[0][0], length):
            for acc in dkv:
                acc.zero_()
        for i, (keys, dk, dv) in enumerate(parts):
            for acc, grad in zip(dkv, (dk, dv)):
                if first and i == 0 and covers_all(keys, length):
                    acc.copy_(grad)
                else:
                    acc[:, keys] += grad


def gradient_buffer(k, v):
    """An fp32 accumulator for the (dk, dv) of a K/V block shaped like k and v: one buffer
    laid out as pair()'s (unpair gives its views), so that it too travels as one message."""
    return torch.empty(k.numel() + v.numel(), dtype=torch.float32, device=k.device)


def simulate(qs, ks, vs, options, layout=Dense):
    """Every rank's (out, lse) of ring attention over local parts qs[r], ks[r], vs[r], run in
    one process: each step, every rank computes, then every block moves to the next rank."""
    world_size = len(qs)
    ranks = [ForwardRank(q, r, world_size, options, layout) for r, q in enumerate(qs)]
    blocks = list(zip(ks, vs))
    for step in range(world_size):
        for rank, (k, v) in zip(ranks, blocks):
            rank.step(step, k, v)
        blocks = blocks[-1:] + blocks[:-1]  # rank r receives rank r - 1's block
    return [rank.result() for rank in ranks]


def simulate_backward(qs, ks, vs, outs, lses, douts, options, layout=Dense):
    """Every rank's (dq, dk, dv) of ring attention, in one process, as `simulate`; the
    gradient accumulators travel with their blocks and reach their owners after the last
    step."""
    world_size = len(qs)
    ranks = [BackwardRank(q, out, lse, dout, r, world_size, options, layout)
             for r, (q, out, lse, dout) in enumerate(zip(qs, outs, lses, douts))]
    blocks = list(zip(ks, vs))
    accumulators = [unpair(gradient_buffer(k, v), k.shape, v.shape) for k, v in blocks]
    for step in range(world_size):
        for rank, (k, v), dkv in zip(ranks, blocks, accumulators):
            rank.accumulate(dkv, rank.block_gradients(step, k, v), first=step == 0)
        blocks = blocks[-1:] + blocks[:-1]
        accumulators = accumulators[-1:] + accumulators[:-1]
    return [(rank.dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype))
            for rank, q, k, v, (dk, dv) in zip(ranks, qs, ks, vs, accumulators)]
