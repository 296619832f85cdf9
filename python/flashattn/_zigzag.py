"""The zigzag layout of one sequence over a ring of ranks, and what each ring step computes.

A sequence of length N over W ranks is cut into 2W equal chunks; rank r holds chunks r and
2W-1-r, concatenated (its local sequence, of length N/W). Under a causal mask every rank then
does the same work: chunk r is early in the sequence and sees few keys, chunk 2W-1-r is late
and sees many, and the pairs even out. (A plain cut, rank r holding chunk r alone, would give
the last rank W times the first one's work.)

At ring step s a rank holds the K/V of rank (r - s) mod W, its source, and computes:
- the source is itself: its local queries against its local keys with the causal mask, top-left
  aligned: query chunk r sees the part of chunk r before it, and query chunk 2W-1-r sees all of
  chunk r and the part of chunk 2W-1-r before it; exactly the local sequence's causal mask.
- the source comes before it (source < r): chunk `source` precedes both query chunks, and
  chunk 2W-1-source follows both; every local query against the first half of the keys,
  without a mask.
- the source comes after it (source > r): both key chunks precede chunk 2W-1-r and follow
  chunk r; the second half of the local queries against all the keys, without a mask.
Each off-diagonal step is half of a full local block's work, so every rank does the same
amount at every step. Without the causal mask every step is the whole local block.

A packed batch of sequences (the variable-length layout) is cut the same way, sequence by
sequence: each sequence's length must be a multiple of 2W, and a rank's local pack holds
first every sequence's chunk r, in order, then every sequence's chunk 2W-1-r (its first and
second halves, each a packed batch with prefix sums cu_seqlens / 2W). A step then computes
the same blocks as above, one per pair of halves: its own keys as (first, first) causal,
(second, first) unmasked and (second, second) causal; an earlier rank's as (first, first)
and (second, first); a later rank's as (second, first) and (second, second); without the
causal mask all four pairs.
"""
from dataclasses import dataclass

import torch

from . import _errors

ALL = slice(None)


@dataclass(frozen=True)
class Block:
    """What one ring step computes on a rank: its query rows `rows` against the rows `keys` of
    the K/V block it holds, causal (top-left) or unmasked."""
    rows: slice
    keys: slice
    causal: bool


def block(rank, source, local_seqlen, causal):
    """The Block a rank computes at the ring step that brings it the K/V of rank `source`."""
    if not causal:
        return Block(ALL, ALL, False)
    if source == rank:
        return Block(ALL, ALL, True)
    half = local_seqlen // 2
    if source < rank:
        return Block(ALL, slice(0, half), False)
    return Block(slice(half, None), ALL, False)


def packed_blocks(rank, source, local_total, causal):
    """The Blocks, over the token rows of a packed local batch, that a rank computes at the
    ring step bringing the K/V of rank `source`: one per pair of halves (rows and keys each
    the first or the second half of the local pack; the prefix sums of either are the
    sequences' lengths over 2·world_size)."""
    half = local_total // 2
    first, second = slice(0, half), slice(half, local_total)
    if not causal:
        return [Block(r, k, False) for r in (first, second) for k in (first, second)]
    if source == rank:
        return [Block(first, first, True), Block(second, first, False),
                Block(second, second, True)]
    if source < rank:
        return [Block(first, first, False), Block(second, first, False)]
    return [Block(second, first, False), Block(second, second, False)]


def packed_lengths(cu_seqlens):
    """The sequences' lengths from host prefix sums."""
    return [int(b) - int(a) for a, b in zip(cu_seqlens[:-1], cu_seqlens[1:])]


def require_packed_shardable(cu_seqlens, world_size):
    """Every sequence of a packed batch splits into 2·world_size equal chunks."""
    for i, n in enumerate(packed_lengths(cu_seqlens)):
        if n % (2 * world_size):
            raise _errors.InvalidArgumentError(
                f"cu_seqlens: sequence {i} has length {n}, must be a multiple of 2·world_size "
                f"= {2 * world_size} (the zigzag layout cuts each sequence into 2·world_size "
                f"equal chunks)")


def shard_packed(x, cu_seqlens, world_size, rank):
    """Rank `rank`'s local pack of a packed batch x (total, ...) with host prefix sums
    cu_seqlens: every sequence's chunk `rank`, then every sequence's chunk
    2·world_size-1-rank (see the module's docstring). A new tensor."""
    _require_ring(world_size, rank)
    require_packed_shardable(cu_seqlens, world_size)
    firsts, seconds = [], []
    for start, n in zip(cu_seqlens[:-1], packed_lengths(cu_seqlens)):
        chunk = n // (2 * world_size)
        firsts.append(x[int(start) + rank * chunk:][:chunk])
        seconds.append(x[int(start) + (2 * world_size - 1 - rank) * chunk:][:chunk])
    return torch.cat(firsts + seconds)


def unshard_packed(shards, cu_seqlens):
    """The packed batch from every rank's local pack, in rank order (shard_packed's
    inverse)."""
    world_size = len(shards)
    if world_size == 0:
        raise _errors.InvalidArgumentError("shards: is empty, must hold one part per rank")
    require_packed_shardable(cu_seqlens, world_size)
    chunks = [n // (2 * world_size) for n in packed_lengths(cu_seqlens)]
    halves = [s.split(chunks * 2) for s in shards]  # per rank: firsts then seconds
    sequences = []
    for i in range(len(chunks)):
        order = ([halves[r][i] for r in range(world_size)]
                 + [halves[r][len(chunks) + i] for r in reversed(range(world_size))])
        sequences.extend(order)
    return torch.cat(sequences)


def require_shardable(name, length, world_size):
    """A sequence of `length` splits into the 2·world_size equal chunks of the layout."""
    if length % (2 * world_size):
        raise _errors.InvalidArgumentError(
            f"{name}: sequence length is {length}, must be a multiple of 2·world_size = "
            f"{2 * world_size} (the zigzag layout cuts it into 2·world_size equal chunks)")


def shard(x, world_size, rank, dim=1):
    """Rank `rank`'s local part of the whole sequence x (its chunks rank and
    2·world_size-1-rank along dim, concatenated): a new tensor."""
    _require_ring(world_size, rank)
    require_shardable("x", x.shape[dim], world_size)
    chunks = x.chunk(2 * world_size, dim)
    return torch.cat((chunks[rank], chunks[2 * world_size - 1 - rank]), dim)


def unshard(shards, dim=1):
    """The whole sequence from every rank's local part, in rank order (shard's inverse)."""
    world_size = len(shards)
    if world_size == 0:
        raise _errors.InvalidArgumentError("shards: is empty, must hold one part per rank")
    lengths = {s.shape[dim] for s in shards}
    if len(lengths) != 1 or next(iter(lengths)) % 2:
        raise _errors.InvalidArgumentError(
            f"shards: lengths along dim {dim} are {[s.shape[dim] for s in shards]}, must be "
            f"equal and even (each rank holds two equal chunks)")
    halves = [s.chunk(2, dim) for s in shards]
    ordered = [h[0] for h in halves] + [h[1] for h in reversed(halves)]
    return torch.cat(ordered, dim)


def _require_ring(world_size, rank):
    if not (isinstance(world_size, int) and world_size >= 1):
        raise _errors.InvalidArgumentError(
            f"world_size: is {world_size!r}, must be an int >= 1")
    if not (isinstance(rank, int) and 0 <= rank < world_size):
        raise _errors.InvalidArgumentError(
            f"rank: is {rank!r}, must be an int in [0, world_size) = [0, {world_size})")
