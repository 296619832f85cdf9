"""flashattn.attention_with_kvcache: attention over a KV cache (decoding), contiguous or paged,
with FlashAttention's flash_attn_with_kvcache keywords, for NumPy arrays and PyTorch tensors.

The library takes the cache as the call's k and v and the lengths, the block table and the
keys to append as a flashattn_kv_cache (include/flashattn/flashattn.h). It reads the lengths
and pages itself (checked calls) and checks every tensor it is given; what it cannot see is
checked here: the arrays' types, the lengths' and block table's dtype, shape and device (it
gets bare addresses), and the Python arguments' types.
"""
import numpy as np

from . import _cache, _errors, _numpy, _options
from ._attention import variant_options

# The PyTorch path, or None without torch (as _attention.torch_op).
try:
    from . import _torch_kvcache as torch_kvcache
except ModuleNotFoundError as e:
    if e.name != "torch":
        raise
    torch_kvcache = None


def attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None,
                           block_table=None, *, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           return_softmax_lse=False, num_splits=0, checked=True,
                           backend="auto"):
    """Attention of new queries over a KV cache, after appending the new keys and values to
    it: one decoding step (FlashAttention's flash_attn_with_kvcache, without rotary
    embeddings, cache_batch_idx or cache_leftpad).

    q: (batch, seqlen_q, heads_q, head_dim). The cache, one of two layouts:
      - contiguous (block_table None): k_cache (batch, capacity, heads_kv, head_dim) and
        v_cache (batch, capacity, heads_kv, head_dim_v); sequence b's keys are
        k_cache[b, :length(b)];
      - paged: k_cache (num_pages, page_size, heads_kv, head_dim), v_cache (num_pages,
        page_size, heads_kv, head_dim_v) and block_table int32 (batch,
        pages_per_sequence): sequence b's key j is row j % page_size of page
        block_table[b, j // page_size]; capacity is pages_per_sequence · page_size.
    head_dim_v, v's head_dim, may differ from q's and k's head_dim (e.g. 192 and 128) on
    the backends that take it (flashattn.backends(): takes_head_dim_v).
    cache_seqlens: the keys cached per sequence before the call: an int (every sequence
    alike) or an int32 (batch,) array (NumPy with NumPy inputs, a tensor on q's device with
    torch ones); None: every sequence's cache is full (length = capacity; then k and v
    cannot be given). k, v: optional (batch, seqlen_new, heads_kv, head_dim) keys and
    (batch, seqlen_new, heads_kv, head_dim_v) values, written into each sequence's cache at
    rows cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1 (k_cache and v_cache are
    modified in place), then attended to with the rest: length(b) = cache_seqlens[b] +
    seqlen_new. cache_seqlens itself is not advanced (the caller does that). Lengths may be
    0; a row that sees no key gets 0 and lse -inf.

    causal: FlashAttention's causal for a KV cache, aligned bottom-right per sequence: query
    i sees keys j <= i + length(b) - seqlen_q (the last query sees the whole sequence).
    softmax_scale (default 1/sqrt(head_dim), q's), window_size, softcap and alibi_slopes:
    flashattn.attention's variants (scale there), with that per-sequence alignment.
    num_splits: split-KV, each sequence's keys split over this many blocks merged by their
    lse (0: chosen by the library; 1: none; at most 128). checked: True (default) lets the
    library read cache_seqlens and block_table to the host and reject lengths past the
    capacity and pages out of range, which for CUDA tensors waits for the stream; False
    does no host wait, so the call can be captured in a CUDA graph, and the kernel checks
    on the device instead (a sequence out of range gets NaN rows; only backend cuda_mma
    takes it). backend: "auto" (or None) or a name from flashattn.backends(); "auto" runs
    16-bit CUDA tensors on cuda_mma, other CUDA calls on cuda_tiled (contiguous) or
    cuda_naive (paged), host arrays on cpu (contiguous or paged).

    Returns out, contiguous (batch, seqlen_q, heads_q, head_dim_v) in q's dtype, and with
    return_softmax_lse also lse, float32 (batch, heads_q, seqlen_q). The cache is read and
    written in place, never copied (the library rejects strides it cannot use); q, k and v
    are copied once where their head_dim is not contiguous. No gradients: a torch input that
    requires grad (with grad mode on) raises UnsupportedError. Rejected arguments raise
    flashattn.InvalidArgumentError with the library's message, which names the C ABI's
    fields (kv_cache.seqlens, kv_cache.block_table, ...; the message says which argument
    each one is); an argument of the wrong type raises TypeError.
    """
    _options.backend_value(backend)  # a name the library knows: each path maps it
    options = dict(scale=_options.scale_value(softmax_scale),
                   causal=_options.require_bool("causal", causal), backend=backend,
                   return_lse=_options.require_bool("return_softmax_lse", return_softmax_lse),
                   num_splits=_cache.num_splits_value(num_splits),
                   checked=_options.require_bool("checked", checked),
                   **variant_options(window_size, softcap, alibi_slopes))
    if (k is None) != (v is None):
        raise _errors.InvalidArgumentError(
            f"{'v' if k is not None else 'k'}: is None, but {'k' if k is not None else 'v'} "
            f"is given: appending to the cache needs both (or neither)")
    if cache_seqlens is None and k is not None:
        raise _errors.InvalidArgumentError(
            "cache_seqlens: is None (every sequence's cache full), but k and v are given: "
            "appending needs the lengths to append at")
    lengths = _cache.lengths_value(cache_seqlens)
    if torch_kvcache is not None and isinstance(q, torch_kvcache.torch.Tensor):
        path = torch_kvcache
    elif isinstance(q, np.ndarray):
        path = _numpy
    else:
        raise TypeError(f"q: is a {_options.type_name(q)}, must be a NumPy array or a torch "
                        f"tensor")
    out, lse = path.attention_with_kvcache(q, k_cache, v_cache, k, v, lengths, block_table,
                                           **options)
    return (out, lse) if return_softmax_lse else out
