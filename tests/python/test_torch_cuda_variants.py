"""The attention variants (sliding window, softcap, ALiBi, attn_mask) on PyTorch CUDA tensors: every GPU
backend's forward and every backward against the float64 reference (16-bit: against the
plain formula in that dtype), torch.compile, and the slopes' device rule. Skipped without
torch or a CUDA GPU; a backend the library says cannot run a variant is skipped with the
library's reason, which pytest -rs lists."""
import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
from attention_reference import assert_lse_close  # noqa: E402
from torch_cases import (assert_as_accurate_as_plain, gpu_backends, mask_case,  # noqa: E402
                         numpy_options, pair_id, random_bshd, reference_bshd, skip_unless_runs,
                         unless_unsupported)
from variant_cases import (CASE_IDS, CASES, LONG_CASE_IDS, LONG_CASES,  # noqa: E402
                           LONG_MASK_CASE_IDS, LONG_MASK_CASES, MASK_CASE_IDS, MASK_CASES,
                           alibi_slopes)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
# The variants' cases and the mask cases (test_torch_cuda_bias.py has the mask's own tests).
ALL_CASES = CASES + LONG_CASES + MASK_CASES + LONG_MASK_CASES
ALL_IDS = CASE_IDS + LONG_CASE_IDS + MASK_CASE_IDS + LONG_MASK_CASE_IDS
HEAD_DIMS = (64, 128)


PAIRS, BACKWARD_PAIRS = gpu_backends(), gpu_backends(backward=True)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_forward(case, pair, head_dim):
    backend, dtype = pair
    skip_unless_runs(backend, head_dim)
    q, k, v, _, options = mask_case(case, head_dim=head_dim, dtype=DTYPES[dtype],
                                    device="cuda")
    out, lse = unless_unsupported(lambda: flashattn.attention(
        q, k, v, return_lse=True, backend=backend, **options))
    assert_as_accurate_as_plain((out,), (q, k, v), **options)
    _, expected_lse = reference_bshd(q, k, v, **numpy_options(options))
    assert lse.device == q.device
    assert_lse_close(lse.cpu().numpy(), expected_lse, tol=1e-4 if dtype == "f32" else 1e-3)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("pair", BACKWARD_PAIRS, ids=pair_id)
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_backward(case, pair, head_dim):
    backend, dtype = pair
    skip_unless_runs(backend, head_dim, backward=True)
    q, k, v, dout, options = mask_case(case, head_dim=head_dim, dtype=DTYPES[dtype],
                                       device="cuda")

    def grads():
        out, lse = flashattn.attention(q, k, v, return_lse=True, backend=backend, **options)
        return flashattn.attention_backward(q, k, v, out, dout, lse, backend=backend,
                                            **options)
    assert_as_accurate_as_plain(unless_unsupported(grads), (q, k, v, dout), **options)


@pytest.mark.parametrize("case", [LONG_CASES[-1], LONG_MASK_CASES[-1]],
                         ids=[LONG_CASE_IDS[-1], LONG_MASK_CASE_IDS[-1]])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=str)
def test_autograd_and_deterministic_gradients(dtype, case, head_dim):
    """Deterministic mode bit-identical and accurate; at head dim 128 cuda_wgmma's order of
    dq's adds from the first key tile up, under a window and a mask."""
    q, k, v, dout, options = mask_case(case, head_dim=head_dim, dtype=dtype, device="cuda")
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    flashattn.attention(*leaves, **options).backward(dout)
    grads = [x.grad for x in leaves]
    assert_as_accurate_as_plain(grads, (q, k, v, dout), **options)
    out, lse = flashattn.attention(q, k, v, return_lse=True, **options)
    first, again = (flashattn.attention_backward(q, k, v, out, dout, lse, deterministic=True,
                                                 **options) for _ in range(2))
    for a, b in zip(first, again):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert_as_accurate_as_plain(first, (q, k, v, dout), **options)


def test_torch_compile_fullgraph_with_variants():
    q, k, v = (t.requires_grad_() for t in random_bshd(2, 256, 256, 8, 2, 64,
                                                       dtype=torch.bfloat16, device="cuda",
                                                       seed=2))
    slopes = torch.from_numpy(alibi_slopes(8)).cuda()

    def loss_of(x, y, z):
        out = flashattn.attention(x, y, z, causal=True, window_size=(64, 0), softcap=30.0,
                                  alibi_slopes=slopes)
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


def test_slopes_on_another_device_are_refused():
    q, k, v = random_bshd(1, 8, 8, 4, 2, 32, device="cuda", seed=3)
    with pytest.raises(ValueError, match=r"alibi_slopes: device is cpu, must be q's device"):
        flashattn.attention(q, k, v, alibi_slopes=torch.from_numpy(alibi_slopes(4)))
