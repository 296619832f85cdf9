"""ctypes mirrors of include/flashattn/flashattn.h: its structs, enum values and functions.

The package talks to libflashattn.so only through this C ABI, so it never depends on
PyTorch's (or any Python's) C++ ABI. Keep every definition here in step with the header.
"""
import ctypes

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
            "cuda_tf32x3": 5, "cuda_mma": 6, "cuda_wgmma": 7}


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


def declare(lib):
    """Gives the loaded library's functions their C signatures."""
    lib.flashattn_forward.argtypes = [ctypes.POINTER(Params)]
    lib.flashattn_forward.restype = ctypes.c_int
    lib.flashattn_last_error.argtypes = []
    lib.flashattn_last_error.restype = ctypes.c_char_p


def view(data, dtype, shape, strides, device, device_index=0):
    """A Tensor over `data` (an address); shape and strides are 4 ints each, strides in elements."""
    return Tensor(data, dtype, (ctypes.c_int64 * 4)(*shape), (ctypes.c_int64 * 4)(*strides),
                  device, device_index)
