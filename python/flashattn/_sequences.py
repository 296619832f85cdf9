"""The variable-length (packed) layout's arguments: FlashAttention's varlen layout, checked
where the library cannot check it itself.

batch sequences lie one after another along one seqlen axis: q (total_q, heads_q,
head_dim), k and v (total_k, heads_kv, head_dim); sequence b's rows are cu_seqlens_q[b] ..
cu_seqlens_q[b + 1] - 1 and its keys likewise in cu_seqlens_k, int32 prefix sums of batch + 1
entries. The library reads the prefix sums and checks their values (0 first, nondecreasing,
the total last); it cannot see their length, dtype or device, nor the caller's max_seqlen,
so those are checked here. lse is (heads_q, total_q).
"""
import sys

import numpy as np

from . import _errors, _options

# The 3-d layout of each tensor, as error messages spell it.
DIMENSIONS = {"q": "total_q, heads_q, head_dim", "out": "total_q, heads_q, head_dim",
              "dout": "total_q, heads_q, head_dim", "k": "total_k, heads_kv, head_dim",
              "v": "total_k, heads_kv, head_dim"}


def require_3d(name, shape):
    if len(shape) != 3:
        raise _errors.InvalidArgumentError(
            f"{name}: has shape {tuple(shape)}, must have 3 dimensions ({DIMENSIONS[name]}): "
            f"a variable-length batch packs its sequences along one axis")


def require_prefix_sums(cu_seqlens_q, cu_seqlens_k, dtype_name, is_int32):
    """Both prefix sums' dtype and shape: int32 (batch + 1,), batch >= 0, the same batch for
    both. cu_seqlens_q and cu_seqlens_k are arrays of one type; dtype_name and is_int32 map
    one to its dtype's name and whether that is int32."""
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not is_int32(cu):
            raise _errors.InvalidArgumentError(
                f"{name}: dtype is {dtype_name(cu)}, must be int32 (prefix sums of the "
                f"sequence lengths)")
        if len(cu.shape) != 1 or cu.shape[0] < 1:
            raise _errors.InvalidArgumentError(
                f"{name}: has shape {tuple(cu.shape)}, must be (batch + 1,): the prefix sums "
                f"of the sequence lengths, 0 first")
    if cu_seqlens_k.shape[0] != cu_seqlens_q.shape[0]:
        raise _errors.InvalidArgumentError(
            f"cu_seqlens_k: has {cu_seqlens_k.shape[0]} entries, must have as many as "
            f"cu_seqlens_q ({cu_seqlens_q.shape[0]}): batch + 1, one sequence of keys per "
            f"sequence of queries")


def max_seqlen_value(name, x):
    """max_seqlen_q or max_seqlen_k as an int: None (not given), a Python or NumPy int >= 0
    (not a bool), or a symbolic int (torch.compile)."""
    torch = sys.modules.get("torch")
    if x is None or (torch is not None and isinstance(x, torch.SymInt)):
        return x
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name}: is a {_options.type_name(x)}, must be an int or None")
    if x < 0:
        raise _errors.InvalidArgumentError(f"{name}: is {x}, must be >= 0 (or None)")
    return int(x)


def require_longest(name, max_seqlen, prefix_sums, cu_name):
    """max_seqlen (None: not given) must be at least the longest sequence of prefix_sums, a
    host copy of cu_name's values. FlashAttention sizes its grid by max_seqlen and would
    skip the rows beyond it; flashattn computes the maxima itself, so a smaller value is a
    caller's mistake to report, not a bound to obey."""
    if max_seqlen is None or len(prefix_sums) < 2:
        return
    lengths = np.diff(np.asarray(prefix_sums, dtype=np.int64))
    longest = int(lengths.max())
    if max_seqlen < longest:
        b = int(lengths.argmax())
        raise _errors.InvalidArgumentError(
            f"{name}: is {max_seqlen}, less than the longest sequence in {cu_name} "
            f"(sequence {b}: {longest} = {cu_name}[{b + 1}] - {cu_name}[{b}])")


def lse_shape(q_shape):
    """lse is float32 (heads_q, total_q), as FlashAttention's varlen functions return it."""
    total_q, heads_q, _ = q_shape
    return (heads_q, total_q)


def require_lse(shape, dtype_name, is_float32, q_shape):
    """The forward's lse must be float32 of lse_shape(q_shape)."""
    if not is_float32:
        raise _errors.InvalidArgumentError(
            f"lse: dtype is {dtype_name}, must be float32 (the forward's lse)")
    if tuple(shape) != lse_shape(q_shape):
        raise _errors.InvalidArgumentError(
            f"lse: has shape {tuple(shape)}, must be (heads_q, total_q) = "
            f"{lse_shape(q_shape)} (the forward's lse for q)")
