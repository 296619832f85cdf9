"""flashattn.varlen_attention and varlen_attention_backward: variable-length (packed) batches
in FlashAttention's varlen layout, for NumPy arrays and PyTorch tensors.

The library takes a packed batch as tensors of batch 1: the 3-d arrays go to the same paths
as flashattn.attention's as (1, total, heads, head_dim) views, with the prefix sums.
"""
import numpy as np

from . import _dropout, _errors, _numpy, _options, _sequences
from ._attention import torch_op, variant_options


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                     *, causal=False, causal_alignment="top_left", scale=None,
                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, dropout_p=0.0,
                     dropout_seed=None, dropout_offset=0, generator=None, return_lse=False,
                     backend=None, checked=True):
    """Exact attention over a batch of sequences of different lengths, packed without padding.

    q: (total_q, heads_q, head_dim); k: (total_k, heads_kv, head_dim); v: (total_k,
    heads_kv, head_dim_v) (v's head_dim may differ from q's and k's, as in
    flashattn.attention): the sequences one after another. Sequence b's queries are rows
    cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of q, its keys rows cu_seqlens_k[b] ..
    cu_seqlens_k[b + 1] - 1 of k and v. cu_seqlens_q, cu_seqlens_k: int32 (batch + 1,)
    prefix sums of the lengths, 0 first, nondecreasing, the totals last: NumPy arrays with
    NumPy inputs, torch tensors on q's device with torch inputs. Lengths may be 0. Each
    sequence is its own attention problem: its rows see only its keys, and causal_alignment
    and window_size follow its own lengths (bottom_right: key j <= i + seqlen_k - seqlen_q
    of that sequence). max_seqlen_q, max_seqlen_k: FlashAttention's arguments, optional here
    (the library finds the longest sequences itself); given, each must be at least its
    longest sequence, which the library checks on the host copy of the prefix sums it makes
    anyway (on CUDA that copy waits for the current stream, given or not). checked=False
    (CUDA tensors) makes no host copy, so nothing waits and the call can be captured in a
    CUDA graph: max_seqlen_q and max_seqlen_k are then required (the kernels' grids are
    sized by them, as FlashAttention's are), and the library checks the prefix sums on the
    device; where they break a rule (0 first, nondecreasing, the totals last, no sequence
    longer than its max_seqlen), every element of out and lse is NaN instead of an error.

    Every keyword is flashattn.attention's, with its meaning per sequence (FlashAttention's
    softmax_scale is scale, its return_attn_probs has no counterpart: return_lse gives the
    log-sum-exp; sequence b's dropout is that of batch 1 at dropout_offset + b·heads_q).
    Returns out, contiguous (total_q, heads_q, head_dim_v) in q's dtype, and with return_lse
    also lse, float32 (heads_q, total_q), FlashAttention's varlen layout. A row that sees no
    key (every row of a sequence without keys) gets 0 and lse -inf. On torch tensors out is
    differentiable (autograd, torch.compile); q, k and v get gradients, the prefix sums and
    slopes none. Errors as flashattn.attention's, naming the argument and the rule.
    """
    options = dict(causal=causal, causal_alignment=causal_alignment,
                   scale=_options.scale_value(scale), backend=backend, return_lse=return_lse,
                   **variant_options(window_size, softcap, alibi_slopes),
                   dropout=_dropout.dropout_values(dropout_p, dropout_seed, dropout_offset,
                                                   generator))
    sequences = sequence_arguments(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                   checked)
    path, array_type, _ = array_path(q)
    q, k, v = (batch_of_one(name, x, array_type) for name, x in (("q", q), ("k", k), ("v", v)))
    out, lse = path.attention(q, k, v, **options, sequences=sequences)
    return (out[0], lse[0]) if return_lse else out[0]


def varlen_attention_backward(q, k, v, out, dout, lse, cu_seqlens_q, cu_seqlens_k,
                              max_seqlen_q=None, max_seqlen_k=None, *, causal=False,
                              causal_alignment="top_left", scale=None, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, dropout_p=0.0, dropout_seed=0,
                              dropout_offset=0, backend=None, deterministic=False,
                              checked=True):
    """The gradients (dq, dk, dv) of varlen_attention, given dout, the gradient of a loss
    with respect to its output.

    q, k, v, the prefix sums and every option are the forward's (checked=False: as there,
    dq, dk and dv all NaN where the prefix sums break a rule); out and lse are what
    varlen_attention(..., return_lse=True) returned for them: out (total_q, heads_q,
    head_dim_v), lse float32 (heads_q, total_q); dout has out's shape. Returns dq, dk, dv,
    contiguous in q's dtype with the shapes of q, k, v; the rules are
    flashattn.attention_backward's, per sequence (a key no row of its sequence sees gets dk
    and dv 0).
    """
    options = dict(causal=causal, causal_alignment=causal_alignment,
                   scale=_options.scale_value(scale), backend=backend,
                   deterministic=deterministic,
                   **variant_options(window_size, softcap, alibi_slopes),
                   dropout=_dropout.dropout_values(dropout_p, dropout_seed, dropout_offset))
    sequences = sequence_arguments(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                   checked)
    path, array_type, float32 = array_path(q)
    q, k, v, out, dout = (batch_of_one(name, x, array_type)
                          for name, x in (("q", q), ("k", k), ("v", v), ("out", out),
                                          ("dout", dout)))
    if not isinstance(lse, array_type):
        raise TypeError(f"lse: is a {_options.type_name(lse)}; the inputs must all be NumPy "
                        f"arrays or all torch tensors")
    _sequences.require_lse(lse.shape, lse.dtype, lse.dtype == float32, q.shape[1:])
    grads = path.attention_backward(q, k, v, out, dout, lse[None], **options,
                                    sequences=sequences)
    return tuple(grad[0] for grad in grads)


def sequence_arguments(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, checked):
    """(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, checked) as the paths take
    them: the max_seqlen values checked as ints, checked as a bool, and unchecked calls given
    both maxima; each path checks the prefix sums for its array type."""
    _options.require_bool("checked", checked)
    values = (_sequences.max_seqlen_value("max_seqlen_q", max_seqlen_q),
              _sequences.max_seqlen_value("max_seqlen_k", max_seqlen_k))
    if not checked:
        for name, value in zip(("max_seqlen_q", "max_seqlen_k"), values):
            if value is None:
                raise _errors.InvalidArgumentError(
                    f"{name}: is None; checked=False needs it (the grids are sized by it, as "
                    f"the prefix sums are not read on the host)")
    return (cu_seqlens_q, cu_seqlens_k, *values, checked)


def array_path(q):
    """(implementation, array type, its float32 dtype) for q's type: the NumPy path or the
    torch one, whose attention and attention_backward take the same arguments."""
    if torch_op is not None and isinstance(q, torch_op.torch.Tensor):
        return torch_op, torch_op.torch.Tensor, torch_op.torch.float32
    if isinstance(q, np.ndarray):
        return _numpy, np.ndarray, np.float32
    raise TypeError(f"q: is a {_options.type_name(q)}, must be a NumPy array or a torch tensor")


def batch_of_one(name, x, array_type):
    """x, a 3-d (total, heads, head_dim) array of array_type (v's, out's and dout's
    head_dim being v's), as the (1, total, heads, head_dim) view the library takes."""
    if not isinstance(x, array_type):
        raise TypeError(f"{name}: is a {_options.type_name(x)}; the inputs must all be NumPy "
                        f"arrays or all torch tensors")
    _sequences.require_3d(name, x.shape)
    return x[None]
