"""ctypes mirrors of include/flashattn/flashattn.h: its structs, enum values and functions.

The package talks to libflashattn.so only through this C ABI, so it never depends on
PyTorch's (or any Python's) C++ ABI. Keep every definition here in step with the header.

The ctypes structures define the layout; calls pass flashattn_params,
flashattn_backward_params and the option structs as bytes packed by a struct.Struct derived
from them, since building ctypes structures and arrays per call costs more host time than a
small kernel takes on the GPU.
"""
import ctypes
import struct

# flashattn_status
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_UNSUPPORTED = 2
ERR_CUDA = 3
ERR_INTERNAL = 4

# flashattn_dtype
F32 = 0
F16 = 1
BF16 = 2

# flashattn_bias_type: a float bias added to the scores, or a boolean mask of one byte per element
BIAS_F32 = 0
BIAS_F16 = 1
BIAS_BF16 = 2
BIAS_BOOL = 3

# flashattn_device
CPU = 0
CUDA = 1

# flashattn_mask, by the names of flashattn::Mask
MASKS = {"none": 0, "causal_top_left": 1, "causal_bottom_right": 2}

# flashattn_backend: only FLASHATTN_BACKEND_AUTO is fixed here; every other backend's value and
# name come from the loaded library's table (BackendInfo, read by _backends).
AUTO = 0

# Names of the flashattn_dtype and flashattn_device values, as the library's messages spell them.
DTYPE_NAMES = {F32: "f32", F16: "f16", BF16: "bf16"}
DEVICE_NAMES = {CPU: "cpu", CUDA: "cuda"}


class Tensor(ctypes.Structure):
    """flashattn_tensor: a (batch, seqlen, heads, head_dim) view, strides in elements."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("shape", ctypes.c_int64 * 4),
        ("strides", ctypes.c_int64 * 4),
        ("device", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
    ]


class Params(ctypes.Structure):
    """flashattn_params."""

    _fields_ = [
        ("q", Tensor),
        ("k", Tensor),
        ("v", Tensor),
        ("out", Tensor),
        ("lse", ctypes.c_void_p),
        ("has_scale", ctypes.c_int32),
        ("scale", ctypes.c_float),
        ("mask", ctypes.c_int32),
        ("backend", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
    ]


class BackendInfo(ctypes.Structure):
    """flashattn_backend_info: one row of the library's backend table. The caller sets
    struct_size to sizeof(BackendInfo); the library fills only the bytes that covers (and
    an older library only the fields it knows: the caller zeroes the rest, so a flag it
    leaves reads as 0, "does not take")."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("backend", ctypes.c_int32),
        ("name", ctypes.c_char_p),
        ("device", ctypes.c_int32),
        ("dtypes", ctypes.c_uint32),
        ("max_head_dim", ctypes.c_int32),
        ("compute_capability", ctypes.c_int32),
        ("summary", ctypes.c_char_p),
        ("backward_max_head_dim", ctypes.c_int32),
        ("takes_sequences", ctypes.c_int32),
        ("takes_kv_cache", ctypes.c_int32),
        ("takes_paged_kv", ctypes.c_int32),
        ("takes_backward_sequences", ctypes.c_int32),
        ("takes_head_dim_v", ctypes.c_int32),
        ("takes_backward_head_dim_v", ctypes.c_int32),
    ]


# BackendInfo.backward_max_head_dim: the backend has no backward. Also what an older library,
# which leaves the field as the caller set it, reports when the caller sets it first.
NO_BACKWARD = -1

# What the caller sets BackendInfo.takes_kv_cache to before the call: a library from before
# KV caches leaves it so (it writes only the fields it knows), one that knows them writes 0
# or 1. A library from before KV caches would also ignore flashattn_forward_options.kv_cache
# (it reads only the options' fields it knows), so this is how the package tells them apart.
UNKNOWN_FIELD = -1


class BackwardParams(ctypes.Structure):
    """flashattn_backward_params: a sized struct; the caller sets struct_size to
    sizeof(BackwardParams), as flashattn_backward_defaults() does in C."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("q", Tensor),
        ("k", Tensor),
        ("v", Tensor),
        ("out", Tensor),
        ("dout", Tensor),
        ("lse", ctypes.c_void_p),
        ("dq", Tensor),
        ("dk", Tensor),
        ("dv", Tensor),
        ("has_scale", ctypes.c_int32),
        ("scale", ctypes.c_float),
        ("mask", ctypes.c_int32),
        ("backend", ctypes.c_int32),
        ("deterministic", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
        ("variants", ctypes.c_void_p),
        ("sequences", ctypes.c_void_p),
    ]


class Variants(ctypes.Structure):
    """flashattn_variants: a sized struct; the caller sets struct_size to sizeof(Variants),
    as flashattn_variants_defaults() does in C. The bias fields are its second generation,
    the dropout fields its third: a library from before them reads only the fields of its
    own generation."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("softcap", ctypes.c_float),
        ("alibi_slopes", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
        ("bias_type", ctypes.c_int32),
        ("bias_shape", ctypes.c_int64 * 4),
        ("bias_strides", ctypes.c_int64 * 4),
        ("dropout_p", ctypes.c_float),
        ("dropout_seed", ctypes.c_uint64),
        ("dropout_offset", ctypes.c_uint64),
    ]


def bias_view(data, bias_type, shape, strides):
    """flashattn_variants' bias fields, in field order: the address of a (batch|1, heads_q|1,
    seqlen_q, seqlen_k) bias or mask, its flashattn_bias_type, and 4 sizes and 4 strides (in
    elements)."""
    return (data, bias_type, *shape, *strides)


# No bias (a NULL address), as flashattn_variants_defaults() leaves the fields.
NO_BIAS = bias_view(0, BIAS_F32, (0, 0, 0, 0), (0, 0, 0, 0))

# No dropout: flashattn_variants' (dropout_p, dropout_seed, dropout_offset) as the defaults
# leave them.
NO_DROPOUT = (0.0, 0, 0)

# flashattn_variants_defaults(): every variant off (window sides -1: open; softcap 0; no slopes;
# no bias; no dropout). A variants tuple may stop after the slopes or the bias: the rest are
# then NO_BIAS and NO_DROPOUT.
NO_VARIANTS = (-1, -1, 0.0, 0, NO_BIAS, NO_DROPOUT)


class Sequences(ctypes.Structure):
    """flashattn_sequences: a variable-length batch's int32 prefix sums (addresses), its
    number of sequences, since the second generation the caller's max_seqlen values (-1:
    not given) and since the third whether the library checks the prefix sums on the host
    (0: on the device, without waiting); a sized struct, as Variants."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("cu_seqlens_q", ctypes.c_void_p),
        ("cu_seqlens_k", ctypes.c_void_p),
        ("batch", ctypes.c_int32),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_k", ctypes.c_int64),
        ("checked", ctypes.c_int32),
    ]


class KVCache(ctypes.Structure):
    """flashattn_kv_cache: a KV cache's int32 lengths and block table (addresses), the keys
    and values to append (Tensor views; data 0: none), pages per sequence, whether the
    library checks the lengths and pages on the host, and the split-KV count; a sized struct,
    as Variants."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("seqlens", ctypes.c_void_p),
        ("k_new", Tensor),
        ("v_new", Tensor),
        ("block_table", ctypes.c_void_p),
        ("pages_per_sequence", ctypes.c_int32),
        ("checked", ctypes.c_int32),
        ("key_splits", ctypes.c_int32),
    ]


class ForwardOptions(ctypes.Structure):
    """flashattn_forward_options: the addresses of a Variants, a Sequences and a KVCache (0:
    NULL, the default); a sized struct, as Variants."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("variants", ctypes.c_void_p),
        ("sequences", ctypes.c_void_p),
        ("kv_cache", ctypes.c_void_p),
    ]


# struct codes of the scalar C types used above (standard sizes; pointers are 64-bit).
_CODES = {ctypes.c_void_p: "Q", ctypes.c_int32: "i", ctypes.c_uint32: "I", ctypes.c_int64: "q",
          ctypes.c_uint64: "Q", ctypes.c_float: "f"}


def _scalar_offsets(structure, base=0):
    """(byte offset, struct code) of each scalar in a ctypes Structure, nested ones flattened."""
    for name, ctype in structure._fields_:
        offset = base + getattr(structure, name).offset
        if issubclass(ctype, ctypes.Structure):
            yield from _scalar_offsets(ctype, offset)
        elif issubclass(ctype, ctypes.Array):
            for i in range(ctype._length_):
                yield offset + i * ctypes.sizeof(ctype._type_), _CODES[ctype._type_]
        else:
            yield offset, _CODES[ctype]


def packer(structure):
    """A struct.Struct that packs a ctypes Structure's scalars, in field order, into bytes
    laid out exactly as the structure (padding included)."""
    fmt, end = "=", 0
    for offset, code in _scalar_offsets(structure):
        fmt += "x" * (offset - end) + code
        end = offset + struct.calcsize("=" + code)
    return struct.Struct(fmt + "x" * (ctypes.sizeof(structure) - end))


assert ctypes.sizeof(ctypes.c_void_p) == 8, "flashattn supports 64-bit platforms only"
PARAMS = packer(Params)
BACKWARD_PARAMS = packer(BackwardParams)
VARIANTS = packer(Variants)
SEQUENCES = packer(Sequences)
KV_CACHE = packer(KVCache)
FORWARD_OPTIONS = packer(ForwardOptions)


def pack_params(q, k, v, out, lse, has_scale, scale, mask, backend, stream):
    """flashattn_params as bytes; q, k, v and out are view() tuples, pointers are ints (0 for
    NULL)."""
    return PARAMS.pack(*q, *k, *v, *out, lse, has_scale, scale, mask, backend, stream)


def pack_backward_params(q, k, v, out, dout, lse, dq, dk, dv, has_scale, scale, mask, backend,
                         deterministic, stream, variants=0, sequences=0):
    """flashattn_backward_params as bytes, struct_size set to its size; tensors are view()
    tuples, pointers ints (0 for NULL), variants and sequences the addresses of a
    flashattn_variants and a flashattn_sequences."""
    return BACKWARD_PARAMS.pack(BACKWARD_PARAMS.size, *q, *k, *v, *out, *dout, lse, *dq, *dk,
                                *dv, has_scale, scale, mask, backend, deterministic, stream,
                                variants, sequences)


def pack_variants(window_left, window_right, softcap, alibi_slopes, bias=NO_BIAS,
                  dropout=NO_DROPOUT):
    """flashattn_variants as bytes, struct_size set to its size; alibi_slopes an address (0 for
    NULL), bias a bias_view() tuple, dropout (p, seed, offset)."""
    return VARIANTS.pack(VARIANTS.size, window_left, window_right, softcap, alibi_slopes, *bias,
                         *dropout)


def pack_sequences(cu_seqlens_q, cu_seqlens_k, batch, max_seqlen_q=None, max_seqlen_k=None,
                   checked=True):
    """flashattn_sequences as bytes, struct_size set to its size; the prefix sums are
    addresses; a max_seqlen of None is -1 (not given), and one beyond int64 is passed as
    int64's largest (a sequence has fewer than 2^31 tokens, so both pass the check)."""
    given = lambda x: -1 if x is None else min(x, 2**63 - 1)
    return SEQUENCES.pack(SEQUENCES.size, cu_seqlens_q, cu_seqlens_k, batch, given(max_seqlen_q),
                          given(max_seqlen_k), int(bool(checked)))


def pack_kv_cache(seqlens, k_new, v_new, block_table, pages_per_sequence, checked,
                  key_splits):
    """flashattn_kv_cache as bytes, struct_size set to its size; seqlens and block_table are
    addresses (0 for NULL), k_new and v_new view() tuples (data 0: nothing to append)."""
    return KV_CACHE.pack(KV_CACHE.size, seqlens, *k_new, *v_new, block_table,
                         pages_per_sequence, checked, key_splits)


# A view() of no tensor: kv_cache.k_new and v_new when nothing is appended.
NO_TENSOR = (0, F32, 0, 0, 0, 0, 0, 0, 0, 0, CPU, 0)


def pack_forward_options(variants, sequences, kv_cache=0):
    """flashattn_forward_options as bytes, struct_size set to its size; variants, sequences
    and kv_cache are addresses (0 for NULL)."""
    return FORWARD_OPTIONS.pack(FORWARD_OPTIONS.size, variants, sequences, kv_cache)


def pointed(packed):
    """A buffer holding `packed`, the bytes of a struct the library reads through a pointer
    (flashattn_variants, flashattn_sequences), and its address; (None, 0) for None. The
    buffer must stay referenced until the call that reads the address returns."""
    if packed is None:
        return None, 0
    buffer = ctypes.create_string_buffer(packed, len(packed))
    return buffer, ctypes.addressof(buffer)


def has_backward(lib):
    """Whether lib has flashattn_backward (libraries built before the backward do not)."""
    return hasattr(lib, "flashattn_backward")


def has_variants(lib):
    """Whether lib has flashattn_forward_variants and reads the backward's variants (libraries
    built before the variants do not: they would ignore the backward's field)."""
    return hasattr(lib, "flashattn_forward_variants")


def has_forward_with(lib):
    """Whether lib has flashattn_forward_with and reads the backward's sequences (libraries
    built before variable-length batches do not: they would ignore the backward's field)."""
    return hasattr(lib, "flashattn_forward_with")


def has_dropout(lib):
    """Whether lib reads flashattn_variants' dropout fields (their generation added
    flashattn_dropout_keep_mask; a library from before would attend without dropout)."""
    return hasattr(lib, "flashattn_dropout_keep_mask")


def has_registry(lib):
    """Whether lib has the backend table's functions (libraries built before it do not)."""
    return hasattr(lib, "flashattn_backend_count") and hasattr(lib, "flashattn_get_backend_info")


def declare(lib):
    """Gives the loaded library's functions their C signatures; a library older than the
    backend table, the backward, the variants or the forward's options gets only the
    functions it has."""
    lib.flashattn_forward.argtypes = [ctypes.c_char_p]
    lib.flashattn_forward.restype = ctypes.c_int
    lib.flashattn_last_error.argtypes = []
    lib.flashattn_last_error.restype = ctypes.c_char_p
    if has_backward(lib):
        lib.flashattn_backward.argtypes = [ctypes.c_char_p]
        lib.flashattn_backward.restype = ctypes.c_int
    if has_variants(lib):
        lib.flashattn_forward_variants.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        lib.flashattn_forward_variants.restype = ctypes.c_int
    if has_forward_with(lib):
        lib.flashattn_forward_with.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        lib.flashattn_forward_with.restype = ctypes.c_int
    if has_dropout(lib):
        lib.flashattn_dropout_keep_mask.argtypes = [
            ctypes.c_float, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32, ctypes.c_int32,
            ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p]
        lib.flashattn_dropout_keep_mask.restype = ctypes.c_int
    if has_registry(lib):
        lib.flashattn_backend_count.argtypes = []
        lib.flashattn_backend_count.restype = ctypes.c_int32
        lib.flashattn_get_backend_info.argtypes = [ctypes.c_int32, ctypes.POINTER(BackendInfo)]
        lib.flashattn_get_backend_info.restype = ctypes.c_int


def view(data, dtype, shape, strides, device, device_index=0):
    """flashattn_tensor's scalars, in field order, over `data` (an address); shape and strides
    are 4 ints each, strides in elements."""
    return (data, dtype, *shape, *strides, device, device_index)
