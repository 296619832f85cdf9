"""The library as a build from before a field of flashattn_backend_info would look through
ctypes: flashattn_get_backend_info fills only the fields before `field`, and only the named
entry points exist. For the tests of how the package tells such builds apart."""
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
