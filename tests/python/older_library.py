"""The library as builds from before a struct field would look through ctypes. For the tests
of how the package tells such builds apart.

OlderLibrary: flashattn_get_backend_info fills only the fields before `field`, and only the
named entry points exist. OlderOptionLibrary: flashattn_forward_with reads one of the
structs flashattn_forward_options points to only up to `field` (modelled by shrinking the
struct_size the caller set)."""
import ctypes

from flashattn import _abi


class OlderLibrary:
    def __init__(self, lib, field, entry_points):
        for name in entry_points:
            setattr(self, name, getattr(lib, name))
        self._lib = lib
        self._size = getattr(_abi.BackendInfo, field).offset

    def flashattn_get_backend_info(self, index, info_ref):
        info = info_ref._obj
        size = info.struct_size
        info.struct_size = self._size
        status = self._lib.flashattn_get_backend_info(index, info_ref)
        info.struct_size = size
        return status


class OlderOptionLibrary:
    """option: the flashattn_forward_options field ("variants", "sequences"); structure and
    field: the _abi struct it points to and its first field the build does not know."""

    def __init__(self, lib, option, structure, field):
        for name in ("flashattn_forward", "flashattn_last_error", "flashattn_forward_variants"):
            setattr(self, name, getattr(lib, name))
        self._lib = lib
        self._offset = getattr(_abi.ForwardOptions, option).offset
        self._size = getattr(structure, field).offset

    def flashattn_forward_with(self, params, options):
        address = options and int.from_bytes(options[self._offset:self._offset + 8], "little")
        if address:
            ctypes.c_uint32.from_address(address).value = self._size
        return self._lib.flashattn_forward_with(params, options)
