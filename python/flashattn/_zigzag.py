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
