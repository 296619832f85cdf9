"""attn_mask on PyTorch CUDA tensors (its cases on every GPU backend, forward and backward,
autograd and deterministic gradients run with the other variants' in
test_torch_cuda_variants.py): each float bias dtype with each q dtype, torch.compile,
flashattn.sdpa against torch's SDPA, and the mask's device rule. Skipped without torch or a
CUDA GPU."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import flashattn  # noqa: E402
from attention_reference import rel_l2  # noqa: E402
from torch_cases import (as_float64, assert_as_accurate_as_plain, mask_case,  # noqa: E402
                         random_bhsd, random_bshd)
from variant_cases import LONG_MASK_CASES  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


@pytest.mark.parametrize("bias_dtype", list(DTYPES.values()), ids=str)
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=str)
def test_each_bias_dtype_with_each_q_dtype(dtype, bias_dtype):
    q, k, v, dout, options = mask_case(LONG_MASK_CASES[1], head_dim=64, dtype=dtype,
                                       device="cuda", bias_dtype=bias_dtype)
    assert options["attn_mask"].dtype == bias_dtype
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    out = flashattn.attention(*leaves, **options)
    out.backward(dout)
    assert_as_accurate_as_plain((out.detach(),), (q, k, v), **options)
    assert_as_accurate_as_plain([x.grad for x in leaves], (q, k, v, dout), **options)


def test_torch_compile_fullgraph_with_a_mask():
    q, k, v = (t.requires_grad_() for t in random_bshd(2, 256, 256, 8, 2, 64,
                                                       dtype=torch.bfloat16, device="cuda",
                                                       seed=2))
    bias = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)

    def loss_of(x, y, z):
        padding = (torch.arange(256, device="cuda") < 200).expand(2, 1, 256, 256)
        out = flashattn.attention(x, y, z, causal=True, attn_mask=bias)
        out = out + flashattn.attention(x, y, z, attn_mask=padding)
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


@pytest.mark.parametrize("kind", ["bool", "bias"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_sdpa_matches_torch(dtype, kind):
    """A key padding mask (batch, 1, 1, seqlen_k) and a shared bias (seqlen_q, seqlen_k),
    each read in place: as close to float64 as torch's own SDPA in the dtype (every row
    keeps keys, so torch's rows are defined)."""
    query, key, value = random_bhsd(2, 300, 517, 8, 8, 128, dtype=dtype, device="cuda", seed=3)
    if kind == "bool":
        mask = (torch.arange(517, device="cuda") < torch.tensor([[400], [517]],
                                                                device="cuda"))[:, None, None]
    else:
        mask = torch.randn(300, 517, device="cuda", dtype=dtype)
    ours = flashattn.sdpa(query, key, value, attn_mask=mask)
    theirs = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    exact = F.scaled_dot_product_attention(*(t.double() for t in (query, key, value)),
                                           attn_mask=mask if kind == "bool" else mask.double())
    floor = torch.finfo(dtype).eps / 4
    assert rel_l2(as_float64(ours), as_float64(exact)) <= \
        2 * rel_l2(as_float64(theirs), as_float64(exact)) + floor


def test_sdpa_fully_masked_rows_are_zero():
    query, key, value = random_bhsd(1, 64, 80, 4, 4, 64, dtype=torch.bfloat16, device="cuda",
                                    seed=4)
    mask = torch.ones(64, 80, dtype=torch.bool, device="cuda")
    mask[5] = False
    mask[63] = False
    out = flashattn.sdpa(query, key, value, attn_mask=mask)
    assert not out[:, :, [5, 63]].any() and torch.isfinite(out).all()


def test_a_mask_on_another_device_is_refused():
    q, k, v = random_bshd(1, 8, 8, 4, 2, 32, device="cuda", seed=5)
    with pytest.raises(ValueError, match=r"attn_mask: device is cpu, must be q's device"):
        flashattn.attention(q, k, v, attn_mask=torch.ones(8, 8, dtype=torch.bool))
