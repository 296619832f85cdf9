"""Variable-length (packed) batches on PyTorch CUDA tensors: every GPU backend's forward and
every backward against the float64 plain formula run on each sequence alone (16-bit: against
that formula in the dtype), autograd, deterministic gradients, torch.compile, and the prefix
sums' device rule. Skipped without torch or a CUDA GPU; a backend the library says cannot
run a packed batch is skipped with the library's reason, which pytest -rs lists."""
import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
from attention_reference import assert_lse_close, reference_attention  # noqa: E402
from torch_cases import (as_float64, assert_as_accurate_as_plain, gpu_backends,  # noqa: E402
                         numpy_options, pair_id, plain_outputs, skip_unless_runs,
                         unless_unsupported, varlen_case)
from varlen_cases import (CASE_IDS, CASES, LONG_CASE_IDS, LONG_CASES,  # noqa: E402
                          per_sequence)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
ALL_CASES, ALL_IDS = CASES + LONG_CASES, CASE_IDS + LONG_CASE_IDS
HEAD_DIMS = (64, 128)
PAIRS, BACKWARD_PAIRS = gpu_backends(), gpu_backends(backward=True)


def cuda_case(case, head_dim, dtype):
    return varlen_case(case, head_dim=head_dim, dtype=DTYPES[dtype], device="cuda")


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_forward(case, pair, head_dim):
    backend, dtype = pair
    skip_unless_runs(backend, head_dim)
    q, k, v, _, cu_q, cu_k, options = cuda_case(case, head_dim, dtype)
    out, lse = unless_unsupported(lambda: flashattn.varlen_attention(
        q, k, v, cu_q, cu_k, return_lse=True, backend=backend, **options))
    assert_as_accurate_as_plain((out,), (q, k, v),
                                plain=per_sequence(plain_outputs, cu_q, cu_k, torch.cat),
                                **options)
    _, expected_lse = per_sequence(reference_attention, cu_q, cu_k)(
        *(as_float64(x) for x in (q, k, v)), **numpy_options(options))
    assert lse.device == q.device
    assert_lse_close(lse.cpu().numpy(), expected_lse, tol=1e-4 if dtype == "f32" else 1e-3)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("pair", BACKWARD_PAIRS, ids=pair_id)
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_backward(case, pair, head_dim):
    backend, dtype = pair
    skip_unless_runs(backend, head_dim, backward=True)
    q, k, v, dout, cu_q, cu_k, options = cuda_case(case, head_dim, dtype)

    def grads():
        out, lse = flashattn.varlen_attention(q, k, v, cu_q, cu_k, return_lse=True,
                                              backend=backend, **options)
        return flashattn.varlen_attention_backward(q, k, v, out, dout, lse, cu_q, cu_k,
                                                   backend=backend, **options)
    assert_as_accurate_as_plain(unless_unsupported(grads), (q, k, v, dout),
                                plain=per_sequence(plain_outputs, cu_q, cu_k, torch.cat),
                                **options)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_autograd_and_deterministic_gradients(dtype):
    q, k, v, dout, cu_q, cu_k, options = cuda_case(LONG_CASES[-1], 64, dtype)
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    flashattn.varlen_attention(*leaves, cu_q, cu_k, **options).backward(dout)
    assert_as_accurate_as_plain([x.grad for x in leaves], (q, k, v, dout),
                                plain=per_sequence(plain_outputs, cu_q, cu_k, torch.cat),
                                **options)
    out, lse = flashattn.varlen_attention(q, k, v, cu_q, cu_k, return_lse=True, **options)
    first, again = (flashattn.varlen_attention_backward(q, k, v, out, dout, lse, cu_q, cu_k,
                                                        deterministic=True, **options)
                    for _ in range(2))
    for a, b in zip(first, again):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_torch_compile_fullgraph():
    q, k, v, _, cu_q, cu_k, _ = cuda_case(LONG_CASES[1], 64, "bf16")
    q, k, v = (t.requires_grad_() for t in (q, k, v))

    def loss_of(x, y, z):
        out = flashattn.varlen_attention(x, y, z, cu_q, cu_k, causal=True, window_size=(64, 0))
        return out.float().square().mean()
    torch._dynamo.reset()
    compiled = torch.compile(loss_of, fullgraph=True)
    compiled(q, k, v).backward()
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    loss_of(q, k, v).backward()
    for ours, eager in zip(got, (q, k, v)):
        torch.testing.assert_close(ours, eager.grad)


def test_prefix_sums_on_another_device_are_refused():
    q, k, v, _, cu_q, cu_k, _ = cuda_case(CASES[0], 32, "f32")
    with pytest.raises(ValueError, match=r"cu_seqlens_q: device is cpu, must be q's device"):
        flashattn.varlen_attention(q, k, v, cu_q.cpu(), cu_k)
