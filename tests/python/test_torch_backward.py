"""Autograd through flashattn.attention and flashattn.sdpa on PyTorch CPU tensors, and
flashattn.attention_backward on torch tensors: against torch's own autograd in float64 on
the plain formula, in 16-bit against the same formula in that dtype, under torch.compile,
and the errors. Skipped without torch; test_torch_cuda_backward.py covers the GPU."""
import inspect

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import flashattn  # noqa: E402
from flashattn import _library, _torch_op  # noqa: E402
from attention_reference import plain_attention_backward, rel_l2  # noqa: E402
from torch_cases import (assert_compiled_training_step, autograd_grads, plain_grads,  # noqa: E402
                         random_bhsd, random_bshd)

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim)
SHAPES = [(1, 1, 1, 1, 1, 1), (2, 17, 30, 4, 2, 3), (1, 40, 17, 3, 1, 80)]
SHAPE_IDS = ["b{}_sq{}_sk{}_hq{}_hkv{}_d{}".format(*s) for s in SHAPES]
MASKS = {"none": {}, "top_left": {"causal": True},
         "bottom_right": {"causal": True, "causal_alignment": "bottom_right"}}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def as_f64(t):
    return t.detach().to(torch.float64).numpy()


def assert_gradients_accurate(grads, inputs, dout, options):
    """fp32: each gradient within 1e-5 (relative L2) of float64 autograd on the plain
    formula. 16-bit: at most twice the error of the plain formula differentiated in that
    dtype, plus a quarter ulp; both against float64 autograd on the same rounded inputs."""
    dtype = inputs[0].dtype
    wide = [x.detach().double() for x in (*inputs, dout)]
    expected = plain_grads(*wide, **options)
    plain = plain_grads(*inputs, dout, **options) if dtype != torch.float32 else None
    for i, (grad, x, want) in enumerate(zip(grads, inputs, expected)):
        assert grad.dtype == dtype and grad.shape == x.shape, "qkv"[i]
        err = rel_l2(as_f64(grad), as_f64(want))
        if dtype == torch.float32:
            assert err <= 1e-5, "qkv"[i]
        else:
            floor = torch.finfo(dtype).eps / 4
            assert err <= 2 * rel_l2(as_f64(plain[i]), as_f64(want)) + floor, "qkv"[i]


def test_the_two_oracles_agree():
    """The NumPy oracle (attention_reference) and torch's float64 autograd on the plain
    formula: two derivations of the same gradients."""
    q, k, v = random_bshd(2, 9, 13, 4, 2, 5, dtype=torch.float64, seed=1)
    dout = torch.randn_like(q)
    options = MASKS["bottom_right"]
    _, *numpy_grads = plain_attention_backward(*(x.numpy() for x in (q, k, v, dout)), **options)
    for ours, theirs in zip(plain_grads(q, k, v, dout, **options), numpy_grads):
        np.testing.assert_allclose(ours.numpy(), theirs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_autograd_matches_float64_autograd(shape, mask, dtype):
    q, k, v = random_bshd(*shape, dtype=dtype, seed=sum(shape))
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(7)).to(dtype)
    grads = autograd_grads(q, k, v, dout, **MASKS[mask])
    assert_gradients_accurate(grads, (q, k, v), dout, MASKS[mask])


def test_rows_without_keys_get_dq_zero():
    q, k, v = random_bshd(1, 12, 5, 2, 1, 8, seed=2)
    dq, _, _ = autograd_grads(q, k, v, torch.ones_like(q), **MASKS["bottom_right"])
    assert torch.all(dq[:, :7] == 0) and torch.all(dq[:, 8:] != 0)


@pytest.mark.parametrize("seed", range(4))
def test_sdpa_gradients_match_torch_sdpa(seed):
    rng = np.random.default_rng(seed)
    heads_kv = int(rng.integers(1, 4))
    heads_q = heads_kv * int(rng.choice([1, 2, 3]))
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 50)), int(rng.integers(1, 50)),
             heads_q, heads_kv, int(rng.choice([8, 32, 64])))
    options = dict(is_causal=bool(rng.integers(2)), enable_gqa=heads_q != heads_kv,
                   scale=float(rng.choice([0.2, 1.0])))
    inputs = [x.requires_grad_() for x in random_bhsd(*shape, seed=seed)]
    dout = torch.randn_like(inputs[0])
    flashattn.sdpa(*inputs, **options).backward(dout)
    wide = [x.detach().double().requires_grad_() for x in inputs]
    F.scaled_dot_product_attention(*wide, **options).backward(dout.double())
    for ours, theirs in zip(inputs, wide):
        assert ours.grad.shape == ours.shape
        assert rel_l2(as_f64(ours.grad), as_f64(theirs.grad)) <= 1e-5


def test_strided_inputs_get_their_gradients():
    """q, k, v as views of one packed projection, and head_dim views the kernels cannot
    read in place (copied): the gradients reach the packed tensor as for contiguous ones."""
    packed = torch.randn(2, 19, 3, 4, 40)[..., :32].requires_grad_()
    q, k, v = packed.unbind(2)
    dout = torch.randn(q.shape)
    flashattn.attention(q, k, v, causal=True).backward(dout)
    expected = autograd_grads(*(x.contiguous() for x in (q, k, v)), dout, causal=True)
    for i, want in enumerate(expected):
        torch.testing.assert_close(packed.grad[:, :, i], want, rtol=0, atol=0)
    base = torch.randn(1, 9, 2, 32, requires_grad=True)
    every_other = base[..., ::2]
    flashattn.attention(every_other, every_other, every_other).sum().backward()
    assert torch.all(base.grad[..., 1::2] == 0) and torch.any(base.grad[..., ::2] != 0)


def test_only_inputs_that_need_a_gradient_get_one():
    q, k, v = random_bshd(1, 6, 7, 2, 1, 8, seed=3)
    q.requires_grad_()
    flashattn.attention(q, k, v, causal=True).sum().backward()
    assert q.grad is not None and k.grad is None and v.grad is None
    expected = autograd_grads(q, k, v, torch.ones_like(q), causal=True)[0]
    torch.testing.assert_close(q.grad, expected, rtol=0, atol=0)


def test_raw_backward_equals_autograd_and_the_numpy_path():
    q, k, v = random_bshd(2, 11, 14, 4, 2, 16, seed=4)
    dout = torch.randn_like(q)
    out, lse = flashattn.attention(q, k, v, causal=True, return_lse=True)
    raw = flashattn.attention_backward(q, k, v, out, dout, lse, causal=True)
    for ours, theirs in zip(raw, autograd_grads(q, k, v, dout, causal=True)):
        assert ours.is_contiguous() and not ours.requires_grad
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    arrays = [x.numpy() for x in (q, k, v, out, dout, lse)]
    for ours, theirs in zip(raw, flashattn.attention_backward(*arrays, causal=True)):
        np.testing.assert_array_equal(ours.numpy(), theirs)


def test_lse_carries_no_gradient():
    q, k, v = (x.requires_grad_() for x in random_bshd(1, 5, 5, 2, 2, 8, seed=5))
    out, lse = flashattn.attention(q, k, v, return_lse=True)
    assert out.requires_grad and not lse.requires_grad
    out.sum().backward()
    assert q.grad is not None


def test_eager_training_calls_skip_the_dispatcher_and_equal_the_op():
    """Eager autograd on plain tensors runs the op's body through _EagerAttention, not the
    dispatcher (about 0.25 ms of host time a call less); its out and gradients equal the
    registered op's bit for bit."""
    q, k, v = (x.requires_grad_() for x in random_bshd(2, 9, 12, 4, 2, 16, seed=12))
    out = flashattn.attention(q, k, v, causal=True)
    assert type(out.grad_fn).__name__ == "_EagerAttentionBackward"
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    op_out, _ = _torch_op.attention_fwd(q, k, v, True, "top_left", None, None)
    assert type(op_out.grad_fn).__name__ != "_EagerAttentionBackward"
    op_grads = torch.autograd.grad(op_out.square().sum(), (q, k, v))
    torch.testing.assert_close(out, op_out, rtol=0, atol=0)
    for ours, theirs in zip(grads, op_grads):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_sdpa_trains_in_its_own_layout_and_equals_the_op():
    """sdpa's eager training call takes (batch, heads, seqlen, head_dim) as it is: no
    transposes' nodes in the graph, gradients in the inputs' layout and memory order (a
    leaf's .grad then is the buffer, not a copy), and out and the gradients bit for bit the
    registered op's on transposed views; with create_graph, the backward goes through the
    op (transposed there and back) to the same gradients."""
    q, k, v = (x.requires_grad_() for x in random_bhsd(2, 9, 12, 4, 2, 16, seed=13))
    out = flashattn.sdpa(q, k, v, is_causal=True, enable_gqa=True)
    assert type(out.grad_fn).__name__ == "_EagerAttentionBackward"
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    assert [g.stride() for g in grads] == [q.stride(), k.stride(), v.stride()]
    op_out, _ = _torch_op.attention_fwd(*(t.transpose(1, 2) for t in (q, k, v)), True,
                                        "top_left", None, None)
    op_grads = torch.autograd.grad(op_out.square().sum(), (q, k, v))
    torch.testing.assert_close(out, op_out.transpose(1, 2), rtol=0, atol=0)
    graph_grads = torch.autograd.grad(
        flashattn.sdpa(q, k, v, is_causal=True, enable_gqa=True).square().sum(), (q, k, v),
        create_graph=True)
    for ours, theirs, through_op in zip(grads, op_grads, graph_grads):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
        torch.testing.assert_close(through_op, theirs, rtol=0, atol=0)


def test_run_takes_the_ops_arguments_in_its_order():
    """run_op_inputs hands the op's arguments after backend to run positionally."""
    names = lambda f: list(inspect.signature(f).parameters)  # noqa: E731
    op_names, run_names = names(_torch_op.forward_eager), names(_torch_op.run)
    assert run_names[:7] == op_names[:7]
    assert run_names[7:10] == ["with_lse", "heads_first", "lib"]
    assert run_names[10:] == op_names[7:]


def test_double_backward_is_refused():
    q, k, v = (x.requires_grad_() for x in random_bshd(1, 5, 5, 2, 2, 8, seed=6))
    dq, = torch.autograd.grad(flashattn.attention(q, k, v).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="attention_bwd"):
        dq.sum().backward()


def recording(monkeypatch):
    """The keyword arguments of every _library.backward call, recorded."""
    calls = []
    real = _library.backward

    def record(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)
    monkeypatch.setattr(_library, "backward", record)
    return calls


def test_deterministic_follows_torch_use_deterministic_algorithms(monkeypatch):
    calls = recording(monkeypatch)
    q, k, v = (x.requires_grad_() for x in random_bshd(1, 5, 5, 2, 2, 8, seed=7))
    flashattn.attention(q, k, v).sum().backward()
    try:
        torch.use_deterministic_algorithms(True)
        flashattn.attention(q, k, v).sum().backward()
    finally:
        torch.use_deterministic_algorithms(False)
    assert [c["deterministic"] for c in calls] == [False, True]


def test_backward_runs_on_the_forwards_backend_where_it_has_one(monkeypatch):
    calls = recording(monkeypatch)
    q, k, v = (x.requires_grad_() for x in random_bshd(1, 5, 5, 2, 2, 8, seed=8))
    for backend in ("reference", "cpu", None):
        flashattn.attention(q, k, v, backend=backend).sum().backward()
    values = {b.name: v for b, v in zip(flashattn.backends(),
                                        [flashattn._options.backend_value(b.name)
                                         for b in flashattn.backends()])}
    assert [c["backend"] for c in calls] == [values["reference"], values["cpu"], 0]
    assert _torch_op.backward_backend("cuda_naive", 64) is None  # no backward: automatic
    assert _torch_op.backward_backend("cuda_tiled", 1024) == "cuda_tiled"
    limit = {b.name: b.backward_max_head_dim for b in flashattn.backends()}["cuda_mma"]
    assert _torch_op.backward_backend("cuda_mma", limit) == "cuda_mma"
    assert _torch_op.backward_backend("cuda_mma", limit + 8) is None  # past its limit


def test_backward_op_passes_opcheck():
    q, k, v = random_bshd(1, 7, 9, 4, 2, 16, seed=9)
    out, lse = flashattn.attention(q, k, v, causal=True, return_lse=True)
    dout = torch.randn_like(out)
    for args in [(dout, q, k, v, out, lse, True, "bottom_right", None, None, False),
                 (dout.transpose(1, 2).contiguous().transpose(1, 2), q, k, v, out, lse, False,
                  "top_left", 0.5, "reference", True)]:
        torch.library.opcheck(torch.ops.flashattn.attention_bwd.default, args)


def test_torch_compile_traces_forward_and_backward():
    """fullgraph=True through a training step's loss: the backward graph calls
    flashattn::attention_bwd, and the gradients equal eager's."""
    weight = torch.randn(32, 32, requires_grad=True)

    def loss_of(x, key, value):
        query = (x @ weight).unflatten(-1, (4, 8)).transpose(1, 2)
        out = flashattn.sdpa(query, key, value, is_causal=True, enable_gqa=True)
        return out.square().mean()
    key, value = (t.requires_grad_() for t in random_bhsd(2, 24, 24, 4, 2, 8, seed=10)[1:])
    assert_compiled_training_step(loss_of, torch.randn(2, 24, 32), weight, key, value)


def test_raw_backward_under_torch_compile():
    q, k, v = random_bshd(1, 8, 8, 2, 2, 8, seed=11)
    out, lse = flashattn.attention(q, k, v, return_lse=True)
    dout = torch.randn_like(out)

    def grads(*args):
        return flashattn.attention_backward(*args, causal=False)
    torch._dynamo.reset()
    compiled = torch.compile(grads, fullgraph=True, backend="aot_eager")
    for ours, eager in zip(compiled(q, k, v, out, dout, lse), grads(q, k, v, out, dout, lse)):
        torch.testing.assert_close(ours, eager, rtol=0, atol=0)


def test_empty_problems_have_zero_gradients():
    q, k, v = random_bshd(2, 5, 0, 4, 2, 8, seed=12)
    dq, dk, dv = autograd_grads(q, k, v, torch.ones_like(q))
    assert torch.all(dq == 0) and dk.shape == k.shape and dv.shape == v.shape


def tensors():
    q, k, v = random_bshd(1, 5, 6, 4, 2, 8, seed=13)
    out, lse = flashattn.attention(q, k, v, return_lse=True)
    return q, k, v, out, torch.randn_like(out), lse


def _with(index, value):
    def call(*args):
        args = list(args)
        args[index] = value(args[index])
        return flashattn.attention_backward(*args)
    return call


ERRORS = [
    ("lse_dtype", _with(5, lambda lse: lse.double()), ValueError,
     "lse: dtype is torch.float64, must be float32"),
    ("lse_shape", _with(5, lambda lse: lse[0]), ValueError, "lse: has shape"),
    ("lse_numpy", _with(5, lambda lse: lse.numpy()), TypeError, "lse: is a numpy"),
    ("dout_dtype", _with(4, lambda dout: dout.double()), ValueError,
     "dout: dtype is torch.float64"),
    ("dout_bf16", _with(4, lambda dout: dout.bfloat16()), ValueError,
     "dout: dtype bf16 differs from out's dtype f32"),
    ("dout_rank", _with(4, lambda dout: dout[0]), ValueError, "dout: has shape"),
    ("out_shape", _with(3, lambda out: out[:, :, :2]), ValueError, "out: heads is 2"),
    ("deterministic", lambda *a: flashattn.attention_backward(*a, deterministic=None),
     TypeError, "deterministic: is a NoneType"),
    ("backend", lambda *a: flashattn.attention_backward(*a, backend="cuda_mma"),
     NotImplementedError, "backend: cuda_mma runs on cuda tensors"),
]


@pytest.mark.parametrize("call,error,words", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors_name_the_argument(call, error, words):
    with pytest.raises(error, match=words):
        call(*tensors())
