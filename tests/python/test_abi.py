"""The bytes flashattn passes as flashattn_params match the ctypes mirror of the header."""
import ctypes

from flashattn import _abi


def test_packed_params_read_back_through_the_ctypes_layout():
    q = _abi.view(0x1000, _abi.F16, (2, 3, 4, 5), (60, 20, 5, 1), _abi.CUDA, 1)
    k = _abi.view(0x2000, _abi.BF16, (6, 7, 8, 9), (1, 2, 3, 4), _abi.CPU, 0)
    v = _abi.view(0x3000, _abi.F32, (1, 1, 1, 1), (0, 0, 0, 0), _abi.CUDA, 3)
    out = _abi.view(0x4000, _abi.F16, (2, 3, 4, 5), (-1, 2**40, 5, 1), _abi.CUDA, 1)
    packed = _abi.pack_params(q, k, v, out, 0x5000, 1, 0.25, _abi.MASKS["causal_bottom_right"],
                              _abi.BACKENDS["cuda_wgmma"], 0x6000)
    assert len(packed) == ctypes.sizeof(_abi.Params)
    params = _abi.Params.from_buffer_copy(packed)
    for packed_view, tensor in ((q, params.q), (k, params.k), (v, params.v), (out, params.out)):
        assert (tensor.data, tensor.dtype, *tensor.shape, *tensor.strides, tensor.device,
                tensor.device_index) == packed_view
    assert (params.lse, params.has_scale, params.scale, params.mask, params.backend,
            params.stream) == (0x5000, 1, 0.25, 2, 7, 0x6000)
