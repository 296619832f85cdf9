"""flashattn.attention: one entry point for NumPy arrays and PyTorch tensors."""
import numpy as np

from . import _dropout, _numpy, _options

# The PyTorch operator, or None without torch: torch is optional, but a broken torch
# install (one of its own imports missing) still fails loudly.
try:
    from . import _torch_op as torch_op
except ModuleNotFoundError as e:
    if e.name != "torch":
        raise
    torch_op = None


def attention(q, k, v, *, causal=False, causal_alignment="top_left", scale=None,
              window_size=(-1, -1), softcap=0.0, alibi_slopes=None, attn_mask=None,
              dropout_p=0.0, dropout_seed=None, dropout_offset=0, generator=None,
              return_lse=False, backend=None):
    """Exact attention softmax(q·kᵀ·scale)·v over (batch, seqlen, heads, head_dim) inputs.

    q: (batch, seqlen_q, heads_q, head_dim); k: (batch, seqlen_k, heads_kv, head_dim); v:
    (batch, seqlen_k, heads_kv, head_dim_v), with heads_q a multiple of heads_kv
    (grouped-query attention). v's head_dim_v may differ from q's and k's head_dim (e.g. 192
    for q and k and 128 for v, as in DeepSeek's MLA prefill) on the backends that take it
    (flashattn.backends(): takes_head_dim_v, takes_backward_head_dim_v; the others raise
    UnsupportedError naming v's head_dim); a head_dim limit then bounds the wider of the
    two. PyTorch CUDA tensors run on the GPU kernels, on the current stream; PyTorch CPU
    tensors and NumPy arrays on the CPU backends. Dtypes float32, float16, bfloat16 (NumPy:
    float32, float16); arithmetic is float32. Views whose head_dim is contiguous are read in
    place, others copied once.

    batch, seqlen_q and seqlen_k may be 0; heads and head_dim must be >= 1.

    causal: a bool, mask keys after each query; causal_alignment "top_left" (query i sees
    keys j <= i, PyTorch's is_causal) or "bottom_right" (j <= i + seqlen_k - seqlen_q). A
    query that sees no key (every query when seqlen_k is 0) gets output 0 and lse -inf.
    scale: default 1/sqrt(head_dim) (q's); any finite real number, negative and zero
    included (as PyTorch's SDPA takes it; NaN and Inf raise InvalidArgumentError). NaN or
    Inf in the inputs propagate as in standard attention. backend: None (chosen from the
    device, dtype and sizes) or the name of one of flashattn.backends(), which gives each
    one's device, dtypes and head_dim limit (`flashattn backends` prints the same table).

    The variants, FlashAttention's keywords, each off by default and combinable with each
    other and with causal. With off the alignment's offset (0 for causal top_left;
    seqlen_k - seqlen_q for bottom_right and without causal):
    window_size=(left, right): sliding window, query i sees keys j with i + off - left <= j
    <= i + off + right; -1 leaves a side open ((-1, -1): no window); with causal the right
    side is at most 0. softcap: c > 0 turns each scaled score s into c·tanh(s/c) (0: none).
    alibi_slopes: float32 (heads_q,), on q's device, the same array type as q (a torch
    tensor or a NumPy array); score i, j of head h gets -slope_h·|i + off - j|, after the
    softcap. The slopes get no gradient. softcap and ALiBi need a nonzero scale.
    attn_mask: PyTorch SDPA's, on q's device, the same array type as q: a bool mask (True:
    attend; a False score becomes -inf) or a float bias (float32, float16, bfloat16 for
    tensors, whatever q's dtype) added to score i, j of batch element b and head h after the
    softcap and ALiBi. Its shape broadcasts to (batch, heads_q, seqlen_q, seqlen_k), as in
    PyTorch: 2 to 4 dimensions aligned on the right, each of that size or 1 ((seqlen_q,
    seqlen_k) for every batch element and head, (batch, 1, 1, seqlen_k) for key padding);
    broadcast dimensions and strided views are read in place, never expanded or copied. A
    row whose every score is -inf (all False, or all -inf in the bias) gets output 0, lse
    -inf and no gradient, as in PyTorch's SDPA. Like softcap and ALiBi it needs a nonzero
    scale. The mask gets no gradient (a torch mask that requires grad raises
    UnsupportedError). Dense batches only: varlen_attention and attention_with_kvcache take
    none.
    dropout_p: dropout on the probabilities, as in training (PyTorch's SDPA dropout_p): each
    probability is kept with probability 1 - dropout_p and scaled by 1/(1 - dropout_p), or
    zeroed (dropout_p in [0, 1], rounded to a multiple of 2**-16; lse stays the undropped
    softmax's). Which are dropped is a function of (dropout_seed, dropout_offset) and the
    element's (batch, head, row, key), the same on every backend (flashattn.dropout_mask
    returns it); the backward regenerates it. dropout_seed: a uint64, or None to draw one
    from generator (a torch.Generator, e.g. a CUDA one, which makes the call wait for the GPU;
    a numpy.random.Generator; or None: torch's default CPU generator, which torch.manual_seed
    seeds, or NumPy's fresh entropy without torch). dropout_offset: a uint64 that selects
    the streams offset + b·heads_q + h. To call attention_backward yourself, pass the seed.

    Returns out, contiguous (batch, seqlen_q, heads_q, head_dim_v) in q's dtype (q's shape
    with v's head_dim), and with return_lse also lse, float32 (batch, heads_q, seqlen_q):
    the natural log of each row's softmax denominator. On torch tensors out is
    differentiable (autograd, torch.compile; the backward is attention_backward's, on this
    backend where it has one, else the automatic choice); lse is not. Rejected arguments
    raise flashattn.InvalidArgumentError (a ValueError) with the library's message, naming
    the argument and the rule it broke; an argument of the wrong type raises TypeError.
    """
    options = dict(causal=causal, causal_alignment=causal_alignment,
                   scale=_options.scale_value(scale), backend=backend, return_lse=return_lse,
                   attn_mask=attn_mask, **variant_options(window_size, softcap, alibi_slopes),
                   dropout=_dropout.dropout_values(dropout_p, dropout_seed, dropout_offset,
                                                   generator))
    if torch_op is not None and isinstance(q, torch_op.torch.Tensor):
        out, lse = torch_op.attention(q, k, v, **options)
    elif isinstance(q, np.ndarray):
        out, lse = _numpy.attention(q, k, v, **options)
    else:
        raise TypeError(f"q: is a {type(q).__module__}.{type(q).__qualname__}, must be a NumPy "
                        f"array or a torch tensor")
    return (out, lse) if return_lse else out


def variant_options(window_size, softcap, alibi_slopes):
    """The variants as the NumPy and torch paths take them; each path checks alibi_slopes
    against its own array type."""
    window_left, window_right = _options.window_sides(window_size)
    return dict(window_left=window_left, window_right=window_right,
                softcap=_options.softcap_value(softcap), alibi_slopes=alibi_slopes)


def attention_backward(q, k, v, out, dout, lse, *, causal=False, causal_alignment="top_left",
                       scale=None, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                       attn_mask=None, dropout_p=0.0, dropout_seed=0, dropout_offset=0,
                       backend=None, deterministic=False):
    """The gradients (dq, dk, dv) of attention, given dout, the gradient of a loss with
    respect to the forward's output.

    q, k, v and the options causal, causal_alignment, scale and the variants (window_size,
    softcap, alibi_slopes, attn_mask) are the forward's; out and lse are what
    flashattn.attention(q, k, v, ..., return_lse=True) returned for them (the backward
    recomputes the probabilities from q, k and lse, and reads out for the row sums D_i = Σ
    dout_i·out_i); dout has out's shape (q's, with v's head_dim). Same array types, devices
    and dtypes as flashattn.attention (PyTorch CUDA tensors on the current stream, with no
    host synchronisation); lse is float32 (batch, heads_q, seqlen_q).

    Returns dq, dk, dv: contiguous, in q's dtype, with the shapes of q, k and v (dv has v's
    head_dim). A backend named here must take v's head_dim where it differs from q's
    (flashattn.backends(): takes_backward_head_dim_v). With grouped-query attention, dk and
    dv of a kv head sum over the query heads of its group. A query row that sees no key
    (attn_mask's fully masked rows included) gets dq 0; a key no row sees gets dk and dv 0.
    attn_mask gets no gradient. dropout_p, dropout_seed and dropout_offset are the forward's
    (a seed is required: the backward regenerates the forward's dropout from it).

    backend: None (cpu for host arrays, cuda_tiled for fp32 GPU tensors, cuda_mma for 16-bit
    where its head_dim limit allows (the wider of q's and v's), else cuda_tiled) or the name
    of a backend with a backward (flashattn.backends(): has_backward,
    backward_max_head_dim). deterministic: bit-identical gradients from run to run (a fixed
    order for every sum across thread blocks), at some cost in speed on the GPU backends.
    The outputs carry no autograd history; flashattn.attention and flashattn.sdpa call this
    through autograd. Errors as flashattn.attention's, naming the argument (out, dout, lse,
    ...).
    """
    options = dict(causal=causal, causal_alignment=causal_alignment,
                   scale=_options.scale_value(scale), backend=backend,
                   deterministic=deterministic, attn_mask=attn_mask,
                   **variant_options(window_size, softcap, alibi_slopes),
                   dropout=_dropout.dropout_values(dropout_p, dropout_seed, dropout_offset))
    if torch_op is not None and isinstance(q, torch_op.torch.Tensor):
        return torch_op.attention_backward(q, k, v, out, dout, lse, **options)
    if isinstance(q, np.ndarray):
        return _numpy.attention_backward(q, k, v, out, dout, lse, **options)
    raise TypeError(f"q: is a {type(q).__module__}.{type(q).__qualname__}, must be a NumPy "
                    f"array or a torch tensor")
