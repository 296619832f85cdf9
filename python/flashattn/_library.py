"""Finds, loads and calls libflashattn.so.

Looked up in this order: the file named by the environment variable FLASHATTN_LIBRARY (a
build made elsewhere, e.g. `FLASHATTN_LIBRARY=build/libflashattn.so`), then the copy that
`pip install .` puts inside this package. Loaded on first use, so `import flashattn` works
before the library is built.
"""
import ctypes
import functools
import os
from pathlib import Path

from . import _abi, _errors

ENV_VAR = "FLASHATTN_LIBRARY"
PACKAGED = Path(__file__).with_name("libflashattn.so")


def library_path():
    """The path of the library to load; raises FileNotFoundError naming where it looked."""
    from_env = os.environ.get(ENV_VAR)
    if from_env:
        path = Path(from_env)
        if not path.is_file():
            raise FileNotFoundError(f"flashattn: {ENV_VAR}={from_env} is not a file")
        return path
    if PACKAGED.is_file():
        return PACKAGED
    raise FileNotFoundError(
        f"flashattn: libflashattn.so not found: {ENV_VAR} is unset and {PACKAGED} does not "
        f"exist. Install the package with `pip install .` from the repository root, or "
        f"point {ENV_VAR} at a CMake build's libflashattn.so")


def load(path):
    """The library at `path`, loaded and its functions declared. Two different files load as
    two libraries, so builds can be compared in one process (bench/run --builds)."""
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise OSError(f"flashattn: could not load {path}: {e}") from e
    _abi.declare(lib)
    return lib


@functools.lru_cache(maxsize=None)
def library():
    """The library this package uses (see library_path), loaded on first call."""
    return load(library_path())


def has_any(variants):
    """Whether a (window_left, window_right, softcap, alibi_slopes address[, bias view])
    tuple, or None, asks for any variant."""
    return variants is not None and tuple(variants) != _abi.NO_VARIANTS[:len(variants)]


def has_bias(variants):
    """Whether a variants tuple (has_any's), or None, carries a bias or mask."""
    return variants is not None and len(variants) > 4 and variants[4][0] != 0


def has_dropout(variants):
    """Whether a variants tuple (has_any's), or None, asks for dropout."""
    return variants is not None and len(variants) > 5 and variants[5][0] > 0.0


def require_variant_fields(lib, variants):
    """Raises UnsupportedError naming the library for a build that would ignore what the
    variants ask: a bias or mask, or dropout."""
    if has_bias(variants):
        require_bias(lib)
    if has_dropout(variants):
        require_dropout(lib)


def require_variants(lib):
    """Raises UnsupportedError naming the library for a build from before the variants."""
    if not _abi.has_variants(lib):
        raise _errors.UnsupportedError(
            f"flashattn: {getattr(lib, '_name', lib)} has no attention variants (window, "
            f"softcap, ALiBi: flashattn_forward_variants); it predates them")


def require_sequences(lib):
    """Raises UnsupportedError naming the library for a build from before variable-length
    batches."""
    if not _abi.has_forward_with(lib):
        raise _errors.UnsupportedError(
            f"flashattn: {getattr(lib, '_name', lib)} has no variable-length batches "
            f"(flashattn_forward_with, flashattn_sequences); it predates them")


def option_structs(lib, variants, sequences):
    """The flashattn_variants and flashattn_sequences a call points to, packed: their
    buffers (to keep referenced until the call returns) and addresses (0: NULL, no variants
    or a dense batch). Raises UnsupportedError where lib cannot take what is asked."""
    if has_any(variants):
        require_variants(lib)
    if sequences is not None:
        require_sequences(lib)
    variants_buffer, variants_address = _abi.pointed(
        _abi.pack_variants(*variants) if has_any(variants) else None)
    sequences_buffer, sequences_address = _abi.pointed(
        None if sequences is None else _abi.pack_sequences(*sequences))
    return (variants_buffer, sequences_buffer), (variants_address, sequences_address)


@functools.lru_cache(maxsize=None)
def knows_bias(lib):
    """Whether lib reads flashattn_variants' bias (its second generation): a library from
    before it reads only the fields up to alibi_slopes and would attend without the bias.
    Asked once per library by a call on an empty problem (batch 0) whose bias has no
    flashattn_bias_type: a library that knows the field rejects that type before any work;
    an older one runs the empty call."""
    if not _abi.has_forward_with(lib):
        return False
    empty = _abi.view(0, _abi.F32, (0, 1, 1, 1), (1, 1, 1, 1), _abi.CPU)
    params = _abi.pack_params(empty, empty, empty, empty, 0, False, 0.0, _abi.MASKS["none"],
                              _abi.AUTO, 0)
    unknown_type = _abi.bias_view(1, -1, (0, 1, 1, 1), (0, 0, 0, 0))
    kept, address = _abi.pointed(_abi.pack_variants(-1, -1, 0.0, 0, unknown_type))
    options = _abi.pack_forward_options(address, 0)
    status = lib.flashattn_forward_with(params, options)
    return status == _abi.ERR_INVALID_ARGUMENT and b"bias_type" in lib.flashattn_last_error()


@functools.lru_cache(maxsize=None)
def knows_max_seqlen(lib):
    """Whether lib checks flashattn_sequences' max_seqlen values (their second generation)
    on its own host copy of the prefix sums; for a library from before them, which ignores
    the fields, the caller checks. Asked once per library by an empty packed call whose
    max_seqlen_q is -2: a library that knows the field rejects it before any work; an older
    one runs the empty call."""
    if not _abi.has_forward_with(lib):
        return False
    empty = _abi.view(0, _abi.F32, (1, 0, 1, 1), (1, 1, 1, 1), _abi.CPU)
    params = _abi.pack_params(empty, empty, empty, empty, 0, False, 0.0, _abi.MASKS["none"],
                              _abi.AUTO, 0)
    prefix_sums = (ctypes.c_int32 * 1)(0)
    address = ctypes.addressof(prefix_sums)
    kept, sequences = _abi.pointed(_abi.pack_sequences(address, address, 0, -2))
    options = _abi.pack_forward_options(0, sequences)
    status = lib.flashattn_forward_with(params, options)
    return status == _abi.ERR_INVALID_ARGUMENT and b"max_seqlen_q" in lib.flashattn_last_error()


def require_dropout(lib):
    """Raises UnsupportedError naming the library for a build from before dropout (which
    would ignore flashattn_variants.dropout_p and attend without)."""
    if not _abi.has_dropout(lib):
        raise _errors.UnsupportedError(
            f"flashattn: {getattr(lib, '_name', lib)} has no dropout "
            f"(flashattn_variants.dropout_p, flashattn_dropout_keep_mask); it predates it")


def require_bias(lib):
    """Raises UnsupportedError naming the library for a build from before bias and mask
    tensors (which would ignore them and attend without)."""
    if not knows_bias(lib):
        raise _errors.UnsupportedError(
            f"flashattn: {getattr(lib, '_name', lib)} has no bias or mask tensors "
            f"(flashattn_variants.bias); it predates them")


@functools.lru_cache(maxsize=None)
def knows_kv_cache(lib):
    """Whether lib takes KV-cache calls (flashattn_kv_cache through flashattn_forward_options):
    a library from before them would ignore the options' kv_cache field, and leaves
    BackendInfo.takes_kv_cache as the caller set it (_abi.UNKNOWN_FIELD)."""
    if not (_abi.has_registry(lib) and _abi.has_forward_with(lib)):
        return False
    if lib.flashattn_backend_count() == 0:
        return False
    info = _abi.BackendInfo(struct_size=ctypes.sizeof(_abi.BackendInfo),
                            takes_kv_cache=_abi.UNKNOWN_FIELD)
    status = lib.flashattn_get_backend_info(0, ctypes.byref(info))
    if status != _abi.OK:
        raise _errors.from_status(status, lib.flashattn_last_error().decode())
    return info.takes_kv_cache != _abi.UNKNOWN_FIELD


def require_kv_cache(lib):
    """Raises UnsupportedError naming the library for a build from before KV caches (which
    would ignore the options' kv_cache and attend over k and v as they are)."""
    if not knows_kv_cache(lib):
        raise _errors.UnsupportedError(
            f"flashattn: {getattr(lib, '_name', lib)} has no KV caches (flashattn_kv_cache); "
            f"it predates them")


def forward(q, k, v, out, *, lse=None, scale=None, mask="none", backend=_abi.AUTO, stream=None,
            variants=None, sequences=None, kv_cache=None, lib=None):
    """flashattn_forward on _abi.view() tuples.

    lse is the address of a float32 (batch, heads_q, seqlen_q) buffer or None (or 0: an
    empty one); scale None means 1/sqrt(head_dim); backend is a flashattn_backend value
    (_options.backend_value); stream is a cudaStream_t address or None (the default stream);
    variants is None or (window_left, window_right, softcap, alibi_slopes address) and
    optionally an _abi.bias_view() tuple, as flashattn_variants holds them; sequences is
    None (a dense batch) or (cu_seqlens_q address, cu_seqlens_k address, batch, max_seqlen_q,
    max_seqlen_k[, checked]), as flashattn_sequences holds them (a max_seqlen None: not
    given; checked True by default, and a library before the field checks on the host);
    kv_cache is None (k and v are no cache) or (seqlens address, k_new view, v_new view,
    block_table address, pages_per_sequence, checked, key_splits), as flashattn_kv_cache
    holds them; lib is a load() result, by default library(). Calls flashattn_forward_with
    where lib has it; an older build gets the call it has (flashattn_forward_variants,
    flashattn_forward), and UnsupportedError for what it predates. Raises the _errors
    exception for a non-zero status, with the library's message.
    """
    params = _abi.pack_params(q, k, v, out, lse or 0, scale is not None,
                              0.0 if scale is None else scale, _abi.MASKS[mask], backend,
                              stream or 0)
    lib = lib or library()
    if kv_cache is not None:
        require_kv_cache(lib)
    require_variant_fields(lib, variants)
    if _abi.has_forward_with(lib):
        options = None  # NULL: every default, the plain call's cost
        if has_any(variants) or sequences is not None or kv_cache is not None:
            # The options hold the structs' addresses: kept lives until the call returns.
            kept, addresses = option_structs(lib, variants, sequences)
            cache_buffer, cache_address = _abi.pointed(
                None if kv_cache is None else _abi.pack_kv_cache(*kv_cache))
            options = _abi.pack_forward_options(*addresses, cache_address)
        status = lib.flashattn_forward_with(params, options)
    elif sequences is not None:
        require_sequences(lib)
    elif has_any(variants):
        require_variants(lib)
        status = lib.flashattn_forward_variants(params, _abi.pack_variants(*variants))
    else:
        status = lib.flashattn_forward(params)
    if status != _abi.OK:
        raise _errors.from_status(status, lib.flashattn_last_error().decode())


def backward(q, k, v, out, dout, lse, dq, dk, dv, *, scale=None, mask="none",
             backend=_abi.AUTO, deterministic=False, stream=None, variants=None, sequences=None,
             lib=None):
    """flashattn_backward on _abi.view() tuples: writes dq, dk and dv.

    lse is the address of the forward's float32 (batch, heads_q, seqlen_q) lse (0 where q
    has no elements); the other arguments are forward()'s. Raises UnsupportedError naming
    the library for a build from before the backward (or, with variants or sequences,
    before them), else the _errors exception for a non-zero status, with the library's
    message.
    """
    lib = lib or library()
    if not _abi.has_backward(lib):
        raise _errors.UnsupportedError(
            f"flashattn: {getattr(lib, '_name', lib)} has no backward (flashattn_backward); "
            f"it predates it")
    require_variant_fields(lib, variants)
    # The params hold the structs' addresses: their buffers live until the call returns.
    kept, (variants_address, sequences_address) = option_structs(lib, variants, sequences)
    params = _abi.pack_backward_params(q, k, v, out, dout, lse or 0, dq, dk, dv,
                                       scale is not None, 0.0 if scale is None else scale,
                                       _abi.MASKS[mask], backend, bool(deterministic),
                                       stream or 0, variants_address, sequences_address)
    status = lib.flashattn_backward(params)
    if status != _abi.OK:
        raise _errors.from_status(status, lib.flashattn_last_error().decode())


def dropout_keep_mask(dropout_p, seed, offset, batch, heads_q, seqlen_q, seqlen_k, lib=None):
    """The uint8 (batch, heads_q, seqlen_q, seqlen_k) keep mask of flashattn_dropout_keep_mask
    (1: kept), as a NumPy array."""
    import numpy as np

    lib = lib or library()
    require_dropout(lib)
    sizes = (batch, heads_q, seqlen_q, seqlen_k)
    keep = np.empty(tuple(max(n, 0) for n in sizes), np.uint8)
    status = lib.flashattn_dropout_keep_mask(dropout_p, seed, offset, *sizes,
                                             keep.ctypes.data if keep.size else None)
    if status != _abi.OK:
        raise _errors.from_status(status, lib.flashattn_last_error().decode())
    return keep
