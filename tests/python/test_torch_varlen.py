"""Variable-length (packed) batches on PyTorch CPU tensors: flashattn.varlen_attention against
flashattn.attention on each sequence alone and the float64 plain formula, autograd and the
raw backward against per-sequence gradients, the custom ops under opcheck and
torch.compile, and the prefix sums' errors. Skipped without torch; test_varlen.py covers
NumPy, test_torch_cuda_varlen.py the GPU."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
from attention_reference import assert_lse_close, reference_attention  # noqa: E402
from torch_cases import (as_float64, assert_as_accurate_as_plain,  # noqa: E402
                         assert_compiled_training_step, numpy_options, plain_outputs,
                         varlen_case)
from varlen_cases import CASE_IDS, CASES, per_sequence  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def autograd_grads(q, k, v, dout, cu_q, cu_k, **options):
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    flashattn.varlen_attention(q, k, v, cu_q, cu_k, **options).backward(dout)
    return q.grad, k.grad, v.grad


def dense_autograd_grads(q, k, v, dout, **options):
    """(dq, dk, dv) by autograd through flashattn.attention on one dense batch."""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    flashattn.attention(q, k, v, **options).backward(dout)
    return q.grad, k.grad, v.grad


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_forward_matches_each_sequence_alone(case, dtype):
    q, k, v, _, cu_q, cu_k, options = varlen_case(case, dtype=dtype)
    out, lse = flashattn.varlen_attention(q, k, v, cu_q, cu_k, return_lse=True, **options)
    assert out.shape == q.shape and lse.shape == (q.shape[1], q.shape[0])
    assert_as_accurate_as_plain((out,), (q, k, v),
                                plain=per_sequence(plain_outputs, cu_q, cu_k, torch.cat),
                                **options)
    dense = per_sequence(lambda *a, **o: (flashattn.attention(*a, **o),), cu_q, cu_k,
                         torch.cat)
    torch.testing.assert_close(out, dense(q, k, v, **options)[0], rtol=1e-5, atol=1e-5)
    if dtype == torch.float32:
        _, expected_lse = per_sequence(reference_attention, cu_q, cu_k)(
            *(as_float64(x) for x in (q, k, v)), **numpy_options(options))
        assert_lse_close(lse.numpy(), expected_lse, tol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_autograd_matches_each_sequence_alone(case, dtype):
    q, k, v, dout, cu_q, cu_k, options = varlen_case(case, dtype=dtype)
    grads = autograd_grads(q, k, v, dout, cu_q, cu_k, **options)
    assert_as_accurate_as_plain(grads, (q, k, v, dout),
                                plain=per_sequence(plain_outputs, cu_q, cu_k, torch.cat),
                                **options)
    dense = per_sequence(dense_autograd_grads, cu_q, cu_k, torch.cat)(q, k, v, dout, **options)
    for ours, alone in zip(grads, dense):
        torch.testing.assert_close(ours, alone, rtol=1e-5, atol=1e-5)


def test_raw_backward_equals_autograd_and_the_numpy_path():
    q, k, v, dout, cu_q, cu_k, options = varlen_case(CASES[-2])
    out, lse = flashattn.varlen_attention(q, k, v, cu_q, cu_k, return_lse=True, **options)
    raw = flashattn.varlen_attention_backward(q, k, v, out, dout, lse, cu_q, cu_k, **options)
    for ours, theirs in zip(raw, autograd_grads(q, k, v, dout, cu_q, cu_k, **options)):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    arrays = [x.numpy() for x in (q, k, v, out, dout, lse, cu_q, cu_k)]
    for ours, theirs in zip(raw, flashattn.varlen_attention_backward(
            *arrays, **numpy_options(options))):
        np.testing.assert_array_equal(ours.numpy(), theirs)


def test_ops_pass_opcheck_with_prefix_sums():
    q, k, v, dout, cu_q, cu_k, options = varlen_case(CASES[-2])
    slopes = options["alibi_slopes"]
    packed = [x[None] for x in (q, k, v, dout)]
    forward_args = (*packed[:3], True, "bottom_right", None, None, -1, -1, 3.0, slopes, cu_q,
                    cu_k, 12, None)
    torch.library.opcheck(torch.ops.flashattn.attention_fwd.default, forward_args)
    out, lse = torch.ops.flashattn.attention_fwd(*forward_args)
    assert lse.shape == (1, 4, q.shape[0])
    torch.library.opcheck(torch.ops.flashattn.attention_bwd.default,
                          (packed[3], *packed[:3], out, lse, True, "bottom_right", None, None,
                           False, -1, -1, 3.0, slopes, cu_q, cu_k, None, 15))


def test_torch_compile_traces_a_packed_training_step():
    """fullgraph=True through a loss over a packed batch: both custom ops in the graphs, and
    the gradients of eager."""
    weight = torch.randn(32, 32, requires_grad=True)
    _, key, value, _, cu_q, cu_k, _ = varlen_case(CASES[2], heads=(4, 2), head_dim=8)

    def loss_of(x, key, value):
        query = (x @ weight).unflatten(-1, (4, 8))
        out = flashattn.varlen_attention(query, key, value, cu_q, cu_k, 12, 15, causal=True,
                                         causal_alignment="bottom_right", window_size=(6, 0))
        return out.square().mean()
    key, value = (t.requires_grad_() for t in (key, value))
    assert_compiled_training_step(loss_of, torch.randn(int(cu_q[-1]), 32), weight, key, value)


def test_raw_backward_under_torch_compile():
    q, k, v, dout, cu_q, cu_k, options = varlen_case(CASES[1])
    out, lse = flashattn.varlen_attention(q, k, v, cu_q, cu_k, return_lse=True, **options)

    def grads(*args):
        return flashattn.varlen_attention_backward(*args, cu_q, cu_k, **options)
    torch._dynamo.reset()
    compiled = torch.compile(grads, fullgraph=True, backend="aot_eager")
    for ours, eager in zip(compiled(q, k, v, out, dout, lse), grads(q, k, v, out, dout, lse)):
        torch.testing.assert_close(ours, eager, rtol=0, atol=0)


ERRORS = [
    ("numpy", lambda cu: cu.numpy(), TypeError,
     "cu_seqlens_k: is a numpy.ndarray; with torch inputs it must be a torch tensor"),
    ("int64", lambda cu: cu.long(), ValueError,
     "cu_seqlens_k: dtype is torch.int64, must be int32"),
    ("device", lambda cu: cu.to("meta"), ValueError,
     r"cu_seqlens_k: device is meta, must be q's device \(cpu\)"),
    ("decreasing", lambda cu: cu.flip(0), ValueError,
     "cu_seqlens_k: entry 0 is 48, must be 0"),
]


@pytest.mark.parametrize("requires_grad", [False, True], ids=["direct", "op"])
@pytest.mark.parametrize("change,error,words", [e[1:] for e in ERRORS],
                         ids=[e[0] for e in ERRORS])
def test_prefix_sum_errors_name_the_argument(change, error, words, requires_grad):
    """The same errors from the direct call and through the custom op (autograd)."""
    q, k, v, _, cu_q, cu_k, _ = varlen_case(CASES[0])
    with pytest.raises(error, match=words):
        flashattn.varlen_attention(q.requires_grad_(requires_grad), k, v, cu_q, change(cu_k))


def test_max_seqlen_is_checked_inside_the_op():
    q, k, v, _, cu_q, cu_k, _ = varlen_case(CASES[0])
    with pytest.raises(ValueError, match="max_seqlen_q: is 11, less than the longest"):
        flashattn.varlen_attention(q.requires_grad_(), k, v, cu_q, cu_k, max_seqlen_q=11)
