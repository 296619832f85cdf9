"""The ctypes mirror of the header: the bytes flashattn passes as flashattn_params, the
struct layouts themselves (checked against a C compiler's, where one is installed), and the
backend table read from the library."""
import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import flashattn
from flashattn import _abi, _backends, _library, _options

HEADER_DIR = Path(__file__).resolve().parents[2] / "include"


def test_packed_params_read_back_through_the_ctypes_layout():
    q = _abi.view(0x1000, _abi.F16, (2, 3, 4, 5), (60, 20, 5, 1), _abi.CUDA, 1)
    k = _abi.view(0x2000, _abi.BF16, (6, 7, 8, 9), (1, 2, 3, 4), _abi.CPU, 0)
    v = _abi.view(0x3000, _abi.F32, (1, 1, 1, 1), (0, 0, 0, 0), _abi.CUDA, 3)
    out = _abi.view(0x4000, _abi.F16, (2, 3, 4, 5), (-1, 2**40, 5, 1), _abi.CUDA, 1)
    packed = _abi.pack_params(q, k, v, out, 0x5000, 1, 0.25, _abi.MASKS["causal_bottom_right"],
                              7, 0x6000)
    assert len(packed) == ctypes.sizeof(_abi.Params)
    params = _abi.Params.from_buffer_copy(packed)
    for packed_view, tensor in ((q, params.q), (k, params.k), (v, params.v), (out, params.out)):
        assert (tensor.data, tensor.dtype, *tensor.shape, *tensor.strides, tensor.device,
                tensor.device_index) == packed_view
    assert (params.lse, params.has_scale, params.scale, params.mask, params.backend,
            params.stream) == (0x5000, 1, 0.25, 2, 7, 0x6000)


def test_packed_backward_params_read_back_through_the_ctypes_layout():
    views = [_abi.view(0x1000 * (i + 1), i % 3, (i + 1, 2, 3, 4), (24, 12, 4, 1), _abi.CUDA, i)
             for i in range(8)]
    q, k, v, out, dout, dq, dk, dv = views
    packed = _abi.pack_backward_params(q, k, v, out, dout, 0x9000, dq, dk, dv, 1, -0.5,
                                       _abi.MASKS["causal_top_left"], 6, True, 0xA000, 0xB000,
                                       0xC000)
    assert len(packed) == ctypes.sizeof(_abi.BackwardParams)
    params = _abi.BackwardParams.from_buffer_copy(packed)
    assert params.struct_size == ctypes.sizeof(_abi.BackwardParams)
    for packed_view, name in zip(views, ("q", "k", "v", "out", "dout", "dq", "dk", "dv")):
        tensor = getattr(params, name)
        assert (tensor.data, tensor.dtype, *tensor.shape, *tensor.strides, tensor.device,
                tensor.device_index) == packed_view
    assert (params.lse, params.has_scale, params.scale, params.mask, params.backend,
            params.deterministic, params.stream, params.variants, params.sequences) == (
                0x9000, 1, -0.5, 1, 6, 1, 0xA000, 0xB000, 0xC000)


def test_packed_option_structs_read_back_through_the_ctypes_layout():
    packed = _abi.pack_sequences(0x1000, 0x2000, 7)
    sequences = _abi.Sequences.from_buffer_copy(packed)
    assert sequences.struct_size == ctypes.sizeof(_abi.Sequences) == len(packed)
    assert (sequences.cu_seqlens_q, sequences.cu_seqlens_k, sequences.batch,
            sequences.max_seqlen_q, sequences.max_seqlen_k) == (0x1000, 0x2000, 7, -1, -1)
    sequences = _abi.Sequences.from_buffer_copy(_abi.pack_sequences(0x1000, 0x2000, 7, 2**40, 0))
    assert (sequences.max_seqlen_q, sequences.max_seqlen_k) == (2**40, 0)
    packed = _abi.pack_forward_options(0x3000, 0)
    options = _abi.ForwardOptions.from_buffer_copy(packed)
    assert options.struct_size == ctypes.sizeof(_abi.ForwardOptions) == len(packed)
    assert (options.variants, options.sequences, options.kv_cache) == (0x3000, None, None)
    k_new = _abi.view(0x4000, _abi.BF16, (2, 1, 8, 64), (512, 512, 64, 1), _abi.CUDA, 1)
    v_new = _abi.view(0x5000, _abi.BF16, (2, 1, 8, 64), (1024, 512, 64, 1), _abi.CUDA, 1)
    packed = _abi.pack_kv_cache(0x6000, k_new, v_new, 0x7000, 9, 0, 7)
    cache = _abi.KVCache.from_buffer_copy(packed)
    assert cache.struct_size == ctypes.sizeof(_abi.KVCache) == len(packed)
    for packed_view, tensor in ((k_new, cache.k_new), (v_new, cache.v_new)):
        assert (tensor.data, tensor.dtype, *tensor.shape, *tensor.strides, tensor.device,
                tensor.device_index) == packed_view
    assert (cache.seqlens, cache.block_table, cache.pages_per_sequence, cache.checked,
            cache.key_splits) == (0x6000, 0x7000, 9, 0, 7)
    options = _abi.ForwardOptions.from_buffer_copy(_abi.pack_forward_options(0, 0, 0x8000))
    assert (options.variants, options.sequences, options.kv_cache) == (None, None, 0x8000)


LAYOUTS = {"flashattn_tensor": _abi.Tensor, "flashattn_params": _abi.Params,
           "flashattn_backend_info": _abi.BackendInfo,
           "flashattn_backward_params": _abi.BackwardParams,
           "flashattn_variants": _abi.Variants, "flashattn_sequences": _abi.Sequences,
           "flashattn_kv_cache": _abi.KVCache,
           "flashattn_forward_options": _abi.ForwardOptions}


def c_program_output(tmp_path, lines):
    """The standard output (bytes) of a C program of `lines` built against the
    repository's header; skips where there is no C compiler or include/."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None or not (HEADER_DIR / "flashattn" / "flashattn.h").is_file():
        pytest.skip("needs a C compiler and the repository's include/")
    source = tmp_path / "program.c"
    source.write_text("\n".join(lines))
    subprocess.run([compiler, f"-I{HEADER_DIR}", str(source), "-o", str(tmp_path / "program")],
                   check=True)
    return subprocess.run([str(tmp_path / "program")], check=True, capture_output=True).stdout


def test_struct_layouts_match_the_header(tmp_path):
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "flashattn/flashattn.h"',
             'int main(void) {']
    for c_name, structure in LAYOUTS.items():
        lines.append(f'printf("{c_name} %zu\\n", sizeof({c_name}));')
        for field, _ in structure._fields_:
            lines.append(f'printf("{c_name}.{field} %zu\\n", offsetof({c_name}, {field}));')
    printed = c_program_output(tmp_path, lines + ["return 0;", "}"]).decode()
    expected = []
    for c_name, structure in LAYOUTS.items():
        expected.append(f"{c_name} {ctypes.sizeof(structure)}")
        expected += [f"{c_name}.{field} {getattr(structure, field).offset}"
                     for field, _ in structure._fields_]
    assert printed.split("\n")[:-1] == expected


def test_no_variants_are_the_headers_defaults(tmp_path):
    printed = c_program_output(tmp_path, [
        '#include <stdio.h>', '#include "flashattn/flashattn.h"', 'int main(void) {',
        'flashattn_variants v = flashattn_variants_defaults();',
        'printf("%u %d %d %g %p\\n", v.struct_size, v.window_left, v.window_right, '
        '(double)v.softcap, (void*)v.alibi_slopes);', 'return 0;', '}']).decode().split()
    size, left, right, softcap, slopes = printed
    assert int(size) == ctypes.sizeof(_abi.Variants)
    assert (int(left), int(right), float(softcap), slopes in ("(nil)", "0")) == (
        *_abi.NO_VARIANTS[:3], True)
    assert _abi.NO_VARIANTS[3] == 0


def test_no_variants_pack_as_the_headers_defaults(tmp_path):
    """What the package sends for "every variant off", the bias fields included, is
    flashattn_variants_defaults() byte for byte."""
    printed = c_program_output(tmp_path, [
        '#include <stdio.h>', '#include "flashattn/flashattn.h"', 'int main(void) {',
        'flashattn_variants v = flashattn_variants_defaults();',
        'fwrite(&v, sizeof v, 1, stdout);', 'return 0;', '}'])
    assert printed == _abi.pack_variants(*_abi.NO_VARIANTS)


def test_bias_types_are_the_headers(tmp_path):
    printed = c_program_output(tmp_path, [
        '#include <stdio.h>', '#include "flashattn/flashattn.h"', 'int main(void) {',
        'printf("%d %d %d %d", FLASHATTN_BIAS_F32, FLASHATTN_BIAS_F16, FLASHATTN_BIAS_BF16, '
        'FLASHATTN_BIAS_BOOL);', 'return 0;', '}']).decode()
    assert printed.split() == [str(t) for t in (_abi.BIAS_F32, _abi.BIAS_F16, _abi.BIAS_BF16,
                                                _abi.BIAS_BOOL)]


def test_kv_cache_defaults_are_the_headers(tmp_path):
    """What the package sends for "nothing appended" (NO_TENSOR) and a checked call match
    flashattn_kv_cache_defaults() apart from the fields every call sets."""
    printed = c_program_output(tmp_path, [
        '#include <stdio.h>', '#include "flashattn/flashattn.h"', 'int main(void) {',
        'flashattn_kv_cache c = flashattn_kv_cache_defaults();',
        'fwrite(&c, sizeof c, 1, stdout);', 'return 0;', '}'])
    assert printed == _abi.pack_kv_cache(0, _abi.NO_TENSOR, _abi.NO_TENSOR, 0, 0, 1, 0)


def test_backends_come_from_the_library():
    table = flashattn.backends()
    names = [b.name for b in table]
    assert len(set(names)) == len(names) and {"reference", "cpu"} <= set(names)
    lib = _library.library()
    assert len(table) == lib.flashattn_backend_count()
    for index, backend in enumerate(table):
        info = _abi.BackendInfo(struct_size=ctypes.sizeof(_abi.BackendInfo))
        assert lib.flashattn_get_backend_info(index, ctypes.byref(info)) == _abi.OK
        assert backend.name == info.name.decode()
        assert _options.backend_value(backend.name) == info.backend != _abi.AUTO
        assert backend.device in ("cpu", "cuda")
        assert backend.dtypes and set(backend.dtypes) <= {"f32", "f16", "bf16"}
        assert backend.max_head_dim is None or backend.max_head_dim >= 1
        assert backend.compute_capability is None or backend.compute_capability >= 80
        assert backend.summary
        assert backend.has_backward == (info.backward_max_head_dim != _abi.NO_BACKWARD)
        assert backend.backward_max_head_dim is None or backend.backward_max_head_dim >= 1
    assert _backends.table(lib) is _backends.table(lib)  # read once per library


def test_backend_info_struct_size_limits_what_the_library_writes():
    # An older caller's smaller struct: the library must leave the bytes past it alone.
    size = _abi.BackendInfo.name.offset + ctypes.sizeof(ctypes.c_char_p)
    info = _abi.BackendInfo(struct_size=size, device=-7, summary=None)
    assert _library.library().flashattn_get_backend_info(0, ctypes.byref(info)) == _abi.OK
    assert info.name == flashattn.backends()[0].name.encode()
    assert (info.device, info.summary) == (-7, None)


def test_unknown_backend_lists_the_library_names():
    q = np.zeros((1, 2, 1, 4), np.float32)
    with pytest.raises(flashattn.InvalidArgumentError) as error:
        flashattn.attention(q, q, q, backend="cuda_fast")
    for name in ["auto"] + [b.name for b in flashattn.backends()]:
        assert repr(name) in str(error.value)
    with pytest.raises(flashattn.InvalidArgumentError, match="backend: is 3"):
        flashattn.attention(q, q, q, backend=3)


class PreRegistryLibrary:
    """The library as a build from before the backend table looks to ctypes: only the
    first ABI's functions (bench/run --builds loads such builds)."""

    def __init__(self, lib):
        for name in ("flashattn_forward", "flashattn_last_error", "flashattn_contiguous",
                     "flashattn_default_params"):
            setattr(self, name, getattr(lib, name))


def test_a_library_without_the_backend_table_still_runs():
    old = PreRegistryLibrary(_library.library())
    _abi.declare(old)  # declares what it has
    assert not _abi.has_registry(old)
    with pytest.raises(RuntimeError, match="no backend table"):
        _backends.table(old)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 5, 2, 8)).astype(np.float32) for _ in range(3))
    out = np.empty_like(q)
    views = [_abi.view(a.ctypes.data, _abi.F32, a.shape, (80, 16, 8, 1), _abi.CPU)
             for a in (q, k, v, out)]
    # The name goes through the package's (current) library's table; the old one only runs.
    _library.forward(*views, mask="causal_top_left", backend=_options.backend_value("cpu"),
                     lib=old)
    np.testing.assert_array_equal(out, flashattn.attention(q, k, v, causal=True, backend="cpu"))


class PreBackwardLibrary:
    """A build from before the backward, as ctypes sees it: no flashattn_backward, and a
    flashattn_get_backend_info that fills only the fields it knew."""

    def __init__(self, lib):
        for name in ("flashattn_forward", "flashattn_last_error", "flashattn_backend_count"):
            setattr(self, name, getattr(lib, name))
        self._lib = lib

    def flashattn_get_backend_info(self, index, info_ref):
        info = info_ref._obj
        info.struct_size = _abi.BackendInfo.backward_max_head_dim.offset
        return self._lib.flashattn_get_backend_info(index, info_ref)


def test_a_library_without_the_backward_reports_none_and_refuses_it():
    old = PreBackwardLibrary(_library.library())
    assert not _abi.has_backward(old) and _abi.has_registry(old)
    rows = _backends.table(old)
    assert rows and not any(backend.has_backward for _, backend in rows.values())
    view = _abi.view(0, _abi.F32, (0, 1, 1, 1), (1, 1, 1, 1), _abi.CPU)
    with pytest.raises(flashattn.UnsupportedError, match="no backward"):
        _library.backward(*[view] * 5, 0, *[view] * 3, lib=old)


def test_backward_struct_size_must_cover_the_first_generation():
    q = np.zeros((1, 2, 1, 4), np.float32)
    view = _abi.view(q.ctypes.data, _abi.F32, q.shape, (8, 4, 4, 1), _abi.CPU)
    packed = bytearray(_abi.pack_backward_params(*[view] * 5, q.ctypes.data, *[view] * 3, 0,
                                                 0.0, 0, 0, 0, 0))
    packed[:4] = (8).to_bytes(4, "little")
    lib = _library.library()
    assert lib.flashattn_backward(bytes(packed)) == _abi.ERR_INVALID_ARGUMENT
    assert b"struct_size is 8" in lib.flashattn_last_error()
