"""flashattn.ring_attention: one sequence's attention over the ranks of a torch.distributed
group (context parallelism), with autograd.

The ranks form a ring. At every step each rank sends the K/V block it holds to the next rank
and receives the previous rank's, with point-to-point operations started before the step's
attention and waited for after it, so the transfer runs beside the computation: NCCL runs
them on its own CUDA stream, which waits for the blocks' producers on the current stream, and
the current stream waits for the transfer only where the next step needs it (no host
synchronisation). The backward moves the K/V blocks the same way and, beside them, each
block's fp32 (dk, dv) accumulator, which collects every rank's part of the block's gradient
and arrives at its owner after the last step. _ring has the per-rank arithmetic.
"""
import torch
import torch.distributed as dist

from . import _errors, _options, _ring, _torch_op, _zigzag


class Ring:
    """A rank's neighbours on its group's ring: it sends to the next rank and receives from
    the previous one."""

    def __init__(self, group):
        self.group = group if group is not None else dist.group.WORLD
        self.rank = dist.get_rank(self.group)
        self.world_size = dist.get_world_size(self.group)
        self.next = dist.get_global_rank(self.group, (self.rank + 1) % self.world_size)
        self.previous = dist.get_global_rank(self.group, (self.rank - 1) % self.world_size)

    def start(self, send, receive):
        """Starts sending `send` to the next rank and receiving the previous rank's into
        `receive`; returns what `finish` waits for. Neither buffer may be touched until then
        (`send` may be read)."""
        return dist.batch_isend_irecv([
            dist.P2POp(dist.isend, send, self.next, self.group),
            dist.P2POp(dist.irecv, receive, self.previous, self.group)])

    @staticmethod
    def finish(pending):
        """Orders what follows on the current stream after the exchange (on the CPU, waits)."""
        for work in pending:
            work.wait()


def forward(q, k, v, ring, options, layout):
    """This rank's (out, lse) over the whole sequence's keys."""
    rank = _ring.ForwardRank(q, ring.rank, ring.world_size, options, layout)
    block = _ring.pair(k, v)  # one message per step
    spare = torch.empty_like(block) if ring.world_size > 1 else None
    for step in range(ring.world_size):
        pending = ring.start(block, spare) if step + 1 < ring.world_size else None
        rank.step(step, *_ring.unpair(block, k.shape, v.shape))
        if pending is not None:
            ring.finish(pending)
            block, spare = spare, block
    return rank.result()


def backward(q, k, v, out, lse, dout, ring, options, layout):
    """This rank's (dq, dk, dv): its local queries' gradient and its local keys' and values'
    gradients summed over every rank's queries."""
    rank = _ring.BackwardRank(q, out, lse, dout, ring.rank, ring.world_size, options, layout)
    block = _ring.pair(k, v)
    spare = torch.empty_like(block) if ring.world_size > 1 else None
    gradients = _ring.gradient_buffer(k, v)
    gradients_spare = torch.empty_like(gradients)
    gradients_pending = None
    for step in range(ring.world_size):
        pending = ring.start(block, spare) if step + 1 < ring.world_size else None
        parts = rank.block_gradients(step, *_ring.unpair(block, k.shape, v.shape))
        if gradients_pending is not None:  # the accumulator of the block now held
            ring.finish(gradients_pending)
            gradients, gradients_spare = gradients_spare, gradients
        rank.accumulate(_ring.unpair(gradients, k.shape, v.shape), parts, first=step == 0)
        if ring.world_size > 1:
            gradients_pending = ring.start(gradients, gradients_spare)
        if pending is not None:
            ring.finish(pending)
            block, spare = spare, block
    if gradients_pending is not None:  # this rank's own block, back from its round
        ring.finish(gradients_pending)
        gradients = gradients_spare
    dk, dv = _ring.unpair(gradients, k.shape, v.shape)
    return rank.dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class RingAttention(torch.autograd.Function):
    """ring_attention with autograd: the backward is `backward` over the same ring."""

    @staticmethod
    def forward(ctx, q, k, v, ring, options, layout):
        out, lse = forward(q, k, v, ring, options, layout)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring, ctx.options, ctx.layout = ring, options, layout
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = backward(q, k, v, out, lse, dout, ctx.ring, ctx.options, ctx.layout)
        return dq, dk, dv, None, None, None


def ring_attention(q, k, v, *, group=None, causal=False, scale=None, return_lse=False,
                   backend=None, deterministic=False, checked=True, cu_seqlens=None,
                   max_seqlen=None):
    """Attention over one sequence whose tokens are split across the ranks of a
    torch.distributed group (context parallelism), differentiable.

    Each rank passes its local part: q (batch, local_seqlen, heads_q, head_dim), k (batch,
    local_seqlen, heads_kv, head_dim) and v (batch, local_seqlen, heads_kv, head_dim_v),
    torch tensors (CUDA with an NCCL group, one GPU per rank; CPU with a gloo group), every
    dtype and head_dim that flashattn.attention takes, GQA and v's own head_dim included.
    Without `causal` any split of the sequence works (each rank's queries see every rank's
    keys). With `causal` (PyTorch's is_causal over the whole sequence) the parts must be in
    the zigzag layout that balances the causal work: flashattn.zigzag_shard(x, world_size,
    rank) cuts a whole sequence into them and flashattn.zigzag_unshard(parts) joins them;
    local_seqlen must then be even, and q and k of the same length.

    A packed batch of sequences of different lengths (varlen_attention's layout): q
    (local_total, heads_q, head_dim), k (local_total, heads_kv, head_dim) and v
    (local_total, heads_kv, head_dim_v), with cu_seqlens the whole batch's int32 prefix sums
    (batch + 1,) on q's device, the same on every rank, and optionally max_seqlen its
    longest sequence. Every sequence is its own problem, cut into 2·world_size chunks (its
    length a multiple of that), causal or not: flashattn.zigzag_shard_packed(x, cu_seqlens,
    world_size, rank) makes a rank's local pack (every sequence's first chunk, then every
    sequence's second one) and zigzag_unshard_packed(parts, cu_seqlens) joins them.

    Returns this rank's out (batch, local_seqlen, heads_q, head_dim_v), in q's dtype, and
    with return_lse also its lse, float32 (batch, heads_q, local_seqlen), over the whole
    sequence's keys (packed: out (local_total, heads_q, head_dim_v), lse (heads_q,
    local_total)). The partial results of the ring's steps merge in fp32; in the backward
    dk and dv sum over the ranks in fp32. scale, backend and deterministic are
    flashattn.attention's and attention_backward's (deterministic: bit-identical gradients,
    the ring's own order being fixed).

    checked: every rank's shapes (k's, and v's head_dim), dtype and device kind (and prefix
    sums) are compared through one small all_gather_object (a host synchronisation) and a
    mismatch raises flashattn.InvalidArgumentError on every rank, naming the argument and
    the ranks; with checked=False nothing is exchanged but the blocks, and mismatched parts
    are undefined behaviour (a hang or garbage). Every rank of the group must call with the
    same options.
    """
    _options.require_bool("causal", causal)
    _options.require_bool("checked", checked)
    _options.require_bool("deterministic", deterministic)
    _options.require_bool("return_lse", return_lse)
    if not dist.is_available() or not dist.is_initialized():
        raise _errors.InvalidArgumentError(
            "group: torch.distributed is not initialised; call "
            "torch.distributed.init_process_group first")
    ring = Ring(group)
    options = _ring.Options(causal, _options.scale_value(scale), backend, deterministic)
    packed = cu_seqlens is not None
    if packed:
        q, k, v = (batch_of_one(name, t) for name, t in (("q", q), ("k", k), ("v", v)))
    problem = local_problem(q, k, v, causal, packed)
    layout = _ring.Dense
    if packed and problem.error is None:
        layout, problem = packed_layout(cu_seqlens, max_seqlen, q, ring.world_size, checked,
                                        problem)
    if checked:
        require_same_on_every_rank(problem, ring)
    elif problem.error is not None:
        raise problem.error
    out, lse = RingAttention.apply(q, k, v, ring, options, layout)
    if packed:
        out, lse = out[0], lse[0]
    return (out, lse) if return_lse else out


def batch_of_one(name, t):
    """A packed part (local_total, heads, head_dim) as the (1, local_total, heads, head_dim)
    view the ring computes on."""
    if not isinstance(t, torch.Tensor) or t.dim() != 3:
        raise _errors.InvalidArgumentError(
            f"{name}: has shape {tuple(getattr(t, 'shape', ()))}, must have 3 dimensions "
            f"(local_total, heads, head_dim) with cu_seqlens (a packed batch)")
    return t[None]


def packed_layout(cu_seqlens, max_seqlen, q, world_size, checked, problem):
    """The Packed layout of a rank's local pack: the halves' prefix sums (cu_seqlens / 2W,
    on q's device) and longest half; checked, the prefix sums are read to the host and
    every sequence must split into 2W chunks that add up to the local pack."""
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dtype != torch.int32 \
            or cu_seqlens.dim() != 1 or cu_seqlens.device != q.device:
        return _ring.Dense, LocalProblem(_errors.InvalidArgumentError(
            f"cu_seqlens: must be an int32 torch tensor (batch + 1,) on q's device "
            f"({q.device})"), None)
    chunks = 2 * world_size
    if checked:
        host = cu_seqlens.tolist()
        try:
            _zigzag.require_packed_shardable(host, world_size)
            if host[-1] != world_size * q.shape[1]:
                raise _errors.InvalidArgumentError(
                    f"q: local total is {q.shape[1]}, must be cu_seqlens[-1] / world_size = "
                    f"{host[-1]} / {world_size} (every rank holds 1/world_size of each "
                    f"sequence)")
        except _errors.InvalidArgumentError as e:
            return _ring.Dense, LocalProblem(e, None)
        problem = LocalProblem(None, problem.signature + (tuple(host),))
    longest = None if max_seqlen is None else max_seqlen // chunks
    return _ring.Packed(torch.div(cu_seqlens, chunks, rounding_mode="floor"), longest), problem


class LocalProblem:
    """A rank's check of its own part: the error it found (or None) and what every rank's
    part must share (the K/V block, which travels: shape, dtype, device kind)."""

    SHARED = ("k: shape", "k: dtype", "k: device type", "v: head_dim", "cu_seqlens")

    def __init__(self, error, signature):
        self.error, self.signature = error, signature


def local_problem(q, k, v, causal, packed=False):
    """The checks a rank can make alone, before any exchange: an error is kept, not raised,
    so that every rank can learn of it and none is left waiting in the ring."""
    try:
        for name, t in (("q", q), ("k", k), ("v", v)):
            _torch_op.check_tensor(name, t)
        require_local_rules(q, k, v, causal, packed)
    except (_errors.Error, TypeError) as e:
        return LocalProblem(e, None)
    return LocalProblem(None, (tuple(k.shape), str(k.dtype), k.device.type, v.shape[3]))


def require_local_rules(q, k, v, causal, packed):
    """What the ring needs of one rank's part beyond flashattn.attention's rules, and those
    of its rules that would otherwise fail on one rank mid-ring."""
    if tuple(v.shape[:3]) != tuple(k.shape[:3]):
        raise _errors.InvalidArgumentError(
            f"v: has shape {tuple(v.shape)}, must equal k's {tuple(k.shape)} but for its "
            f"head_dim (the ring sends them as one block)")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype or t.device != q.device:
            raise _errors.InvalidArgumentError(
                f"{name}: is {t.dtype} on {t.device}, must be q's dtype and device "
                f"({q.dtype} on {q.device})")
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3] or q.shape[2] % k.shape[2]:
        raise _errors.InvalidArgumentError(
            f"k: has shape {tuple(k.shape)}, must have q's batch and head_dim and a number of "
            f"heads that divides q's (q: {tuple(q.shape)})")
    if packed and q.shape[1] != k.shape[1]:
        raise _errors.InvalidArgumentError(
            f"k: local total is {k.shape[1]}, must equal q's ({q.shape[1]}): the ring takes "
            f"one packed batch of sequences for queries and keys alike")
    if packed:
        return
    if causal and q.shape[1] != k.shape[1]:
        raise _errors.InvalidArgumentError(
            f"k: local seqlen is {k.shape[1]}, must equal q's ({q.shape[1]}) with causal (the "
            f"zigzag layout of one sequence's queries and keys)")
    if causal and q.shape[1] % 2:
        raise _errors.InvalidArgumentError(
            f"q: local seqlen is {q.shape[1]}, must be even with causal (the zigzag layout: "
            f"two equal chunks per rank; flashattn.zigzag_shard makes them)")
    if q.is_cuda and q.get_device() != torch.cuda.current_device():
        raise _errors.InvalidArgumentError(
            f"q: is on {q.device}, must be on the current CUDA device (cuda:"
            f"{torch.cuda.current_device()}), the one the ring's NCCL exchanges use")


def require_same_on_every_rank(problem, ring):
    """Every rank's LocalProblem through one all_gather_object; the first rank's error, or
    the first mismatch of the blocks that travel, raised on every rank alike."""
    everyone = [None] * ring.world_size
    mine = (None if problem.error is None else f"{type(problem.error).__name__}: "
            f"{problem.error}", problem.signature)
    dist.all_gather_object(everyone, mine, group=ring.group)
    if problem.error is not None:
        raise problem.error
    for r, (message, _) in enumerate(everyone):
        if message is not None:
            raise _errors.InvalidArgumentError(
                f"group: rank {r} rejected its part ({message}); every rank stops")
    first = everyone[0][1]
    for r, (_, signature) in enumerate(everyone):
        for name, ours, theirs in zip(LocalProblem.SHARED, first, signature):
            if ours != theirs:
                raise _errors.InvalidArgumentError(
                    f"{name} is {theirs} on rank {r} and {ours} on rank 0, must be the same "
                    f"on every rank of the group (the ring passes k and v from rank to rank)")
