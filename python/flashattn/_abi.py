"""ctypes mirrors of include/flashattn/flashattn.h: its structs, enum values and functions.

The package talks to libflashattn.so only through this C ABI, so it never depends on
PyTorch's (or any Python's) C++ ABI. Keep every definition here in step with the header.

The ctypes structures define the layout; calls pass flashattn_params as bytes packed by a
struct.Struct derived from them, since building ctypes structures and arrays per call costs
more host time than a small kernel takes on the GPU.
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

# flashattn_device
CPU = 0
CUDA = 1

# flashattn_mask, by the names of flashattn::Mask
MASKS = {"none": 0, "causal_top_left": 1, "causal_bottom_right": 2}

# flashattn_backend, by the names flashattn::to_string(Backend) gives
BACKENDS = {"auto": 0, "reference": 1, "cpu": 2, "cuda_naive": 3, "cuda_tiled": 4,
            "cuda_tf32x3": 5, "cuda_mma": 6, "cuda_wgmma": 7,
            "cuda_f16x3": 8}


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


# struct codes of the scalar C types used above (standard sizes; pointers are 64-bit).
_CODES = {ctypes.c_void_p: "Q", ctypes.c_int32: "i", ctypes.c_int64: "q", ctypes.c_float: "f"}


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


def pack_params(q, k, v, out, lse, has_scale, scale, mask, backend, stream):
    """flashattn_params as bytes; q, k, v and out are view() tuples, pointers are ints (0 for
    NULL)."""
    return PARAMS.pack(*q, *k, *v, *out, lse, has_scale, scale, mask, backend, stream)


def declare(lib):
    """Gives the loaded library's functions their C signatures."""
    lib.flashattn_forward.argtypes = [ctypes.c_char_p]
    lib.flashattn_forward.restype = ctypes.c_int
    lib.flashattn_last_error.argtypes = []
    lib.flashattn_last_error.restype = ctypes.c_char_p


def view(data, dtype, shape, strides, device, device_index=0):
    """flashattn_tensor's scalars, in field order, over `data` (an address); shape and strides
    are 4 ints each, strides in elements."""
    return (data, dtype, *shape, *strides, device, device_index)
