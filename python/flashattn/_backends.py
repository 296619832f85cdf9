"""flashattn.backends(): the library's backend table, read through its C ABI.

The table lives in the library (the same one the C++ API and the `flashattn backends`
command print); the package keeps no copy of it. Read once per loaded library.
"""
import ctypes
import functools
from typing import NamedTuple, Optional

from . import _abi, _errors, _library

AUTO = _abi.AUTO  # backend=None: the library chooses


class Backend(NamedTuple):
    """One backend of the loaded library, as flashattn_get_backend_info describes it."""

    name: str                          # what backend= takes: "cpu", "cuda_mma", ...
    device: str                        # "cpu" or "cuda": where its tensors must live
    dtypes: tuple                      # the dtypes it takes: some of "f32", "f16", "bf16"
    max_head_dim: Optional[int]        # None: any head_dim
    compute_capability: Optional[int]  # None: any GPU of 8.0 or newer; else only this one
    #                                    (major * 10 + minor, e.g. 90)
    summary: str                       # how it computes, in one line
    has_backward: bool                 # whether attention_backward (and autograd) runs on it
    backward_max_head_dim: Optional[int]  # the backward's head_dim limit; None: any (or
    #                                       no backward, see has_backward)
    takes_head_dim_v: bool = False     # whether its forward runs v's head_dim ≠ q's and k's
    #                                    (out then has v's); its limits apply to the wider
    takes_backward_head_dim_v: bool = False  # whether its backward does too


@functools.lru_cache(maxsize=None)
def table(lib):
    """{name: (flashattn_backend value, Backend)} of every backend in lib's table, in the
    library's order. Raises RuntimeError for a library built before the table existed."""
    if not _abi.has_registry(lib):
        raise RuntimeError(f"flashattn: {getattr(lib, '_name', lib)} has no backend table "
                           f"(flashattn_backend_count); it predates it")
    rows = {}
    for index in range(lib.flashattn_backend_count()):
        # A library from before the backward leaves backward_max_head_dim as set here, one
        # from before head_dim_v its flags 0 (ctypes zeroes the fields it is not given).
        info = _abi.BackendInfo(struct_size=ctypes.sizeof(_abi.BackendInfo),
                                backward_max_head_dim=_abi.NO_BACKWARD)
        status = lib.flashattn_get_backend_info(index, ctypes.byref(info))
        if status != _abi.OK:
            raise _errors.from_status(status, lib.flashattn_last_error().decode())
        name = info.name.decode()
        rows[name] = (info.backend, Backend(
            name=name,
            device=_abi.DEVICE_NAMES.get(info.device, str(info.device)),
            dtypes=tuple(n for d, n in _abi.DTYPE_NAMES.items() if info.dtypes >> d & 1),
            max_head_dim=info.max_head_dim or None,
            compute_capability=info.compute_capability or None,
            summary=(info.summary or b"").decode(),
            has_backward=info.backward_max_head_dim != _abi.NO_BACKWARD,
            backward_max_head_dim=max(info.backward_max_head_dim, 0) or None,
            takes_head_dim_v=bool(info.takes_head_dim_v),
            takes_backward_head_dim_v=bool(info.takes_backward_head_dim_v)))
    return rows


def backends():
    """The backends of the library this package uses (see flashattn._library), in the
    library's order: what each is called (backend=), where its tensors live, the dtypes it
    takes, its head_dim limit, the GPU it needs, how it computes, whether it has a
    backward (attention_backward, autograd) with that backward's head_dim limit, and whether
    its forward and its backward take v's head_dim differing from q's and k's
    (takes_head_dim_v, takes_backward_head_dim_v). The command-line tool prints the same
    table (`flashattn backends`)."""
    return [backend for _, backend in table(_library.library()).values()]


def value(name):
    """The flashattn_backend value of `name` ("auto" or a name from backends()), looked up in
    the table of the package's library: a library loaded from elsewhere (an older build,
    bench/run --builds) gets the value this library gives the name. KeyError if unknown."""
    if name == "auto":
        return AUTO
    return table(_library.library())[name][0]


def names():
    """The backend names the package's library knows, in its order."""
    return tuple(table(_library.library()))
