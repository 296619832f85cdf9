"""The (batch, seqlen, heads, head_dim) layout: rank check, output shapes, and which strides
the kernels read in place."""
from . import _errors


def require_4d(name, shape):
    if len(shape) != 4:
        raise _errors.InvalidArgumentError(
            f"{name}: has shape {tuple(shape)}, must have 4 dimensions "
            f"(batch, seqlen, heads, head_dim)")


def kernels_accept(shape, strides):
    """Whether the kernels can read a view with these strides (in elements) without a copy:
    every stride non-negative and head_dim contiguous."""
    return min(strides) >= 0 and (strides[3] == 1 or shape[3] == 1)


def contiguous_strides(shape):
    """Row-major strides, in elements, of a tensor of `shape`: what the library is given for
    a tensor without elements, whose own strides (NumPy gives them all 0) say nothing."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def out_shape(q_shape, v_shape):
    """out is (batch, seqlen_q, heads_q) of q with v's head_dim (head_dim_v, which may differ
    from q's and k's)."""
    return (*q_shape[:3], v_shape[3])


def lse_shape(q_shape):
    """lse is float32 (batch, heads_q, seqlen_q): the library writes it contiguous."""
    batch, seqlen_q, heads_q, _ = q_shape
    return (batch, heads_q, seqlen_q)


def require_lse(shape, dtype_name, is_float32, q_shape):
    """The forward's lse must be float32 of lse_shape(q_shape): the library reads it as such
    (contiguous; the callers copy a strided one) and cannot check its size itself."""
    if not is_float32:
        raise _errors.InvalidArgumentError(
            f"lse: dtype is {dtype_name}, must be float32 (the forward's lse)")
    if tuple(shape) != lse_shape(q_shape):
        raise _errors.InvalidArgumentError(
            f"lse: has shape {tuple(shape)}, must be (batch, heads_q, seqlen_q) = "
            f"{lse_shape(q_shape)} (the forward's lse for q)")


def require_slopes(shape, dtype_name, is_float32, heads_q):
    """ALiBi's slopes must be float32 (heads_q,), one per query head: the library reads them
    as such and cannot check their size itself."""
    if not is_float32:
        raise _errors.InvalidArgumentError(
            f"alibi_slopes: dtype is {dtype_name}, must be float32 (one slope per query head)")
    if tuple(shape) != (heads_q,):
        raise _errors.InvalidArgumentError(
            f"alibi_slopes: has shape {tuple(shape)}, must be (heads_q,) = ({heads_q},): one "
            f"slope per query head, the same for every batch element")
