"""A KV cache's arguments (flashattn.attention_with_kvcache), checked where the library cannot
check them itself, and the library's names for them.

The library reads the lengths (cache_seqlens) and the block table through bare addresses:
their dtype, shape and device are checked here. It checks their values itself (lengths
within the capacity, pages in range) when the call is checked.
"""
import re

import numpy as np

from . import _errors, _library, _options

INT32_MIN, INT32_MAX = _options.INT32_MIN, _options.INT32_MAX


def num_splits_value(num_splits):
    """num_splits as an int: a Python or NumPy int (not a bool), or a symbolic int
    (torch.compile); its range is the library's to check ([0, 128])."""
    num_splits = _options.int_or_symbolic(num_splits, "num_splits: is", "0: automatic")
    if _options.is_symbolic(num_splits):
        return num_splits
    if not INT32_MIN <= num_splits <= INT32_MAX:
        raise _errors.InvalidArgumentError(
            f"num_splits: is {num_splits}, must be in [0, 128] (0: automatic)")
    return num_splits


def lengths_value(cache_seqlens):
    """cache_seqlens as the paths take it: None (full caches), an int (one length for every
    sequence; a symbolic int under torch.compile), or the array itself, which each path
    checks for its array type."""
    if cache_seqlens is None or _options.is_symbolic(cache_seqlens):
        return cache_seqlens
    if isinstance(cache_seqlens, bool):
        raise TypeError("cache_seqlens: is a bool, must be an int or an int32 array")
    if isinstance(cache_seqlens, (int, np.integer)):
        if not INT32_MIN <= cache_seqlens <= INT32_MAX:
            raise _errors.InvalidArgumentError(
                f"cache_seqlens: is {cache_seqlens}, beyond int32; must be >= 0 and, with "
                f"the keys appended, at most the capacity")
        return int(cache_seqlens)
    return cache_seqlens


def require_lengths(shape, dtype_name, is_int32, batch):
    """cache_seqlens, an array: int32 (batch,)."""
    if not is_int32:
        raise _errors.InvalidArgumentError(
            f"cache_seqlens: dtype is {dtype_name}, must be int32 (the keys cached per "
            f"sequence)")
    if tuple(shape) != (batch,):
        raise _errors.InvalidArgumentError(
            f"cache_seqlens: has shape {tuple(shape)}, must be (batch,) = ({batch},): one "
            f"length per sequence of q")


def require_block_table(shape, dtype_name, is_int32, batch):
    """block_table: int32 (batch, pages_per_sequence)."""
    if not is_int32:
        raise _errors.InvalidArgumentError(
            f"block_table: dtype is {dtype_name}, must be int32 (page indices)")
    if len(shape) != 2 or shape[0] != batch:
        raise _errors.InvalidArgumentError(
            f"block_table: has shape {tuple(shape)}, must be (batch, pages_per_sequence) with "
            f"batch = {batch} (q's)")


# The library's names for this function's arguments (the C ABI's fields), and the
# arguments they are; a library message that names one gets a note saying which it is.
C_NAMES = {"k": "k_cache", "v": "v_cache", "kv_cache.k_new": "k", "kv_cache.v_new": "v",
           "kv_cache.seqlens": "cache_seqlens", "kv_cache.block_table": "block_table",
           "kv_cache.pages_per_sequence": "block_table.shape[1]",
           "kv_cache.key_splits": "num_splits", "kv_cache.checked": "checked"}
_C_NAME = re.compile(r"(?<![\w.])(kv_cache\.\w+|k|v)(?=[:'\s),(]|$)")


def with_argument_names(error):
    """error (a flashattn.Error from the library) with a note that says which argument each
    C name in its message is: the library calls the cache k and v, and the keys to append
    kv_cache.k_new and kv_cache.v_new."""
    message = str(error)
    named = []
    for name in _C_NAME.findall(message):
        if name in C_NAMES and name not in named:
            named.append(name)
    if not named:
        return error
    note = "; ".join(f"{name} is {C_NAMES[name]}" for name in named)
    return type(error)(f"{message} [in attention_with_kvcache's arguments: {note}]")


def forward(*args, **kwargs):
    """_library.forward for attention_with_kvcache: a library error's message gets the note
    of with_argument_names."""
    try:
        _library.forward(*args, **kwargs)
    except _errors.Error as error:
        raise with_argument_names(error) from None
