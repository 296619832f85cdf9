"""attn_mask, a bias or boolean mask on the scores, as the library reads it: broadcast to
(batch, heads_q, seqlen_q, seqlen_k) by strides (0 along a broadcast dimension), never by a
copy, so a (seqlen_q, seqlen_k) mask shared by every batch element and head is read in place.
"""
from . import _errors

NAME = "attn_mask"
MIN_DIMS, MAX_DIMS = 2, 4


def broadcast(shape, strides, target):
    """(shape, strides) the library takes for a mask of `shape` with element `strides`
    broadcast to target, the scores' shape (batch, heads_q, seqlen_q, seqlen_k), by
    PyTorch's rule for attn_mask: 2 to 4 dimensions, aligned on the right, each of target's
    size or 1. A dimension of size 1 (or one the mask lacks) gets target's size and stride
    0, so the library reads each element where it lies. Raises InvalidArgumentError naming
    attn_mask and the shape it must broadcast to."""
    shape, target = tuple(shape), tuple(target)
    missing = len(target) - len(shape)
    fits = MIN_DIMS <= len(shape) <= MAX_DIMS and all(
        size in (1, full) for size, full in zip(shape, target[missing:]))
    if not fits:
        raise _errors.InvalidArgumentError(
            f"{NAME}: has shape {shape}, must broadcast to (batch, heads_q, seqlen_q, "
            f"seqlen_k) = {target}: 2 to 4 dimensions, aligned on the right, each of that "
            f"size or 1")
    sizes = (1,) * missing + shape
    strides = (0,) * missing + tuple(strides)
    return target, tuple(stride if size == full and size != 1 else 0
                         for size, stride, full in zip(sizes, strides, target))


def require_no_gradient(requires_grad):
    """Refuses a mask that requires grad (with grad mode on): the library computes no
    gradient for it, and torch would otherwise leave its .grad silently None."""
    if requires_grad:
        raise _errors.UnsupportedError(
            f"{NAME}: requires grad, but gradients with respect to {NAME} are not computed; "
            f"detach it ({NAME}.detach()) or compute it under torch.no_grad()")
