"""attn_mask on PyTorch CPU tensors (its cases' forward, autograd and raw backward run with
the other variants' in test_torch_variants.py): each bias dtype with each q dtype, the mask's
lack of a gradient, the custom ops under opcheck and torch.compile, flashattn.sdpa against
torch's own SDPA, and the errors. Skipped without torch; test_torch_cuda_bias.py covers the
GPU."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import flashattn  # noqa: E402
from flashattn import _torch_op  # noqa: E402
from torch_cases import (assert_as_accurate_as_plain, assert_compiled_training_step,  # noqa: E402
                         autograd_grads, mask_case, random_bhsd, random_bshd)
from variant_cases import MASK_CASE_IDS, MASK_CASES, MaskSpec, mask_array  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DETACH = "gradients with respect to attn_mask are not computed; detach it"


def drawn_mask(kind, dims, sizes, seed=0, rows_without_keys=False):
    """A MaskSpec's mask as a CPU tensor for sizes (batch, heads_q, seqlen_q, seqlen_k);
    kind "bfloat16" draws a float32 bias and rounds it."""
    spec = MaskSpec("float32" if kind == "bfloat16" else kind, dims, rows_without_keys)
    mask = torch.from_numpy(mask_array(spec, *sizes, seed=seed))
    return mask.bfloat16() if kind == "bfloat16" else mask


@pytest.mark.parametrize("dtype,bias_dtype", [(torch.float32, torch.bfloat16),
                                              (torch.bfloat16, torch.float16),
                                              (torch.float16, torch.float32)], ids=str)
def test_a_bias_of_any_float_dtype_takes_any_q_dtype(dtype, bias_dtype):
    q, k, v, dout, options = mask_case(MASK_CASES[MASK_CASE_IDS.index("bias_full")],
                                       dtype=dtype, bias_dtype=bias_dtype)
    assert options["attn_mask"].dtype == bias_dtype
    out = flashattn.attention(q, k, v, **options)
    assert_as_accurate_as_plain((out,), (q, k, v), **options)
    assert_as_accurate_as_plain(autograd_grads(q, k, v, dout, **options), (q, k, v, dout),
                                **options)


def test_an_expanded_mask_is_read_in_place():
    """expand() gives stride 0: the library reads the mask's own memory with those strides,
    and computes what the materialised mask gives."""
    q, k, v = random_bshd(2, 9, 12, 4, 2, 16, seed=1)
    mask = drawn_mask("float32", "qk", (2, 4, 9, 12), seed=2)
    spread = mask.expand(2, 4, 9, 12)
    geometry = _torch_op.check_mask(spread, q, k)
    assert geometry == ((2, 4, 9, 12), (0, 0, 12, 1))
    (*_, bias, _), _ = _torch_op.variant_values(-1, -1, 0.0, None, spread, geometry)
    assert bias[0] == mask.data_ptr()
    torch.testing.assert_close(flashattn.attention(q, k, v, attn_mask=spread),
                               flashattn.attention(q, k, v, attn_mask=spread.contiguous()),
                               rtol=0, atol=0)
    padding = (torch.arange(12) < 7).expand(2, 1, 9, 12)  # stride 0 along the rows
    torch.testing.assert_close(flashattn.attention(q, k, v, attn_mask=padding),
                               flashattn.attention(q, k[:, :7], v[:, :7]),
                               rtol=1e-6, atol=1e-6)


# ---- no gradient for the mask ----------------------------------------------------------------

def test_a_mask_that_requires_grad_is_refused():
    q, k, v = random_bshd(1, 5, 6, 2, 2, 8, seed=3)
    bias = torch.zeros(5, 6, requires_grad=True)
    calls = [lambda: flashattn.attention(q, k, v, attn_mask=bias),
             lambda: flashattn.attention(q.requires_grad_(), k, v, attn_mask=bias),
             lambda: flashattn.sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                    attn_mask=bias)]
    for call in calls:
        with pytest.raises(flashattn.UnsupportedError, match=DETACH):
            call()
    with pytest.raises(flashattn.UnsupportedError, match=DETACH):  # the op, called directly
        torch.ops.flashattn.attention_fwd(q, k, v, False, "top_left", None, None,
                                          attn_mask=bias)
    with torch.no_grad():
        flashattn.attention(q, k, v, attn_mask=bias)
    out = flashattn.attention(q, k, v, attn_mask=bias.detach())
    out.sum().backward()
    assert q.grad is not None and bias.grad is None


# ---- the custom ops --------------------------------------------------------------------------

def test_ops_pass_opcheck_with_a_mask():
    q, k, v, dout, options = mask_case(MASK_CASES[MASK_CASE_IDS.index("bias_softcap_alibi")])
    for mask in (options["attn_mask"], drawn_mask("bool", "b11k", (2, 4, 27, 27), seed=4)):
        forward_args = (q, k, v, False, "top_left", 0.5, None, -1, -1, 3.0,
                        options["alibi_slopes"], None, None, None, None, mask)
        torch.library.opcheck(torch.ops.flashattn.attention_fwd.default, forward_args)
        out, lse = torch.ops.flashattn.attention_fwd(*forward_args)
        torch.library.opcheck(torch.ops.flashattn.attention_bwd.default,
                              (dout, q, k, v, out, lse, False, "top_left", 0.5, None, False, -1,
                               -1, 3.0, options["alibi_slopes"], None, None, None, None, mask))


@pytest.mark.parametrize("kind", ["bool", "float32"])
def test_torch_compile_traces_a_mask_forward_and_backward(kind):
    """fullgraph=True through a loss with a shared (seqlen_q, seqlen_k) mask and one made
    inside the compiled function: both custom ops in the graphs, and eager's gradients."""
    weight = torch.randn(32, 32, requires_grad=True)
    shared = drawn_mask(kind, "qk", (2, 4, 24, 24), seed=5)

    def loss_of(x, key, value):
        query = (x @ weight).unflatten(-1, (4, 8))
        padding = (torch.arange(24) < 20).expand(2, 1, 24, 24)
        out = flashattn.attention(query, key, value, attn_mask=shared, causal=True)
        out = out + flashattn.attention(query, key, value, attn_mask=padding)
        return out.square().mean()
    key, value = (t.requires_grad_() for t in random_bshd(2, 24, 24, 4, 2, 8, seed=6)[1:])
    assert_compiled_training_step(loss_of, torch.randn(2, 24, 32), weight, key, value)


def test_raw_backward_with_a_mask_under_torch_compile():
    q, k, v, dout, options = mask_case(MASK_CASES[MASK_CASE_IDS.index("mask_key_padding")])
    out, lse = flashattn.attention(q, k, v, return_lse=True, **options)

    def grads(*args):
        return flashattn.attention_backward(*args, **options)
    torch._dynamo.reset()
    compiled = torch.compile(grads, fullgraph=True, backend="aot_eager")
    for ours, eager in zip(compiled(q, k, v, out, dout, lse), grads(q, k, v, out, dout, lse)):
        torch.testing.assert_close(ours, eager, rtol=0, atol=0)


# ---- flashattn.sdpa against torch's SDPA ------------------------------------------------------

# (id, mask kind, dims, options): masks of each rank and broadcast, with is_causal, GQA.
SDPA_MASKS = [
    ("bool_2d", "bool", "qk", {}),
    ("bool_3d", "bool", "hqk", {}),
    ("bool_4d", "bool", "bhqk", {}),
    ("bool_key_padding", "bool", "b11k", {}),
    ("bool_causal", "bool", "1hqk", dict(is_causal=True)),
    ("float_2d", "float32", "qk", {}),
    ("float_4d_heads_broadcast", "float32", "b1qk", {}),
    ("float_gqa", "float32", "bhqk", dict(enable_gqa=True)),
    ("float_scale", "float32", "hqk", dict(scale=-0.4)),
]


def sdpa_inputs(kind, dims, options, rows_without_keys=False):
    """query, key, value (float32, SDPA's layout), the mask and the sizes."""
    heads_kv = 2 if options.get("enable_gqa") else 4
    query, key, value = random_bhsd(2, 11, 13, 4, heads_kv, 16, seed=7)
    mask = drawn_mask(kind, dims, (2, 4, 11, 13), seed=8, rows_without_keys=rows_without_keys)
    return query, key, value, mask


def with_causal(mask):
    """mask and the top-left causal mask in one: torch's math SDPA takes no attn_mask with
    is_causal (its CPU flash kernel applies both, as flashattn.sdpa does)."""
    after = torch.ones(mask.shape[-2:], dtype=torch.bool).triu(1)
    return mask & ~after if mask.dtype == torch.bool else mask.masked_fill(after, -float("inf"))


def rows_with_keys(torch_out, mask):
    """The query rows torch's SDPA sees keys in, (batch, heads, seqlen_q, 1) bool."""
    scores = torch.zeros(torch_out.shape[:3] + (mask.shape[-1],))
    if mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    else:
        scores = scores + mask
    return ~torch.isneginf(scores).all(dim=-1, keepdim=True)


@pytest.mark.parametrize("kind,dims,options", [c[1:] for c in SDPA_MASKS],
                         ids=[c[0] for c in SDPA_MASKS])
def test_sdpa_matches_torch(kind, dims, options):
    query, key, value, mask = sdpa_inputs(kind, dims, options)
    theirs = dict(options)
    torch_mask = with_causal(mask) if theirs.pop("is_causal", False) else mask
    with sdpa_kernel([SDPBackend.MATH]):
        expected = F.scaled_dot_product_attention(query, key, value, attn_mask=torch_mask,
                                                  **theirs)
    ours = flashattn.sdpa(query, key, value, attn_mask=mask, **options)
    seen = rows_with_keys(expected, torch_mask)
    assert seen.any()
    torch.testing.assert_close(ours * seen, expected * seen, rtol=1e-5, atol=1e-5)
    assert not (ours * ~seen).any()


@pytest.mark.parametrize("kind", ["bool", "float32"])
def test_sdpa_fully_masked_rows_are_zero_with_no_gradient(kind):
    """Rows without keys give 0 (torch's current SDPA gives 0 as well); elsewhere the output
    and the gradients are torch's."""
    query, key, value, mask = sdpa_inputs(kind, "bhqk", {}, rows_without_keys=True)
    leaves = [t.requires_grad_() for t in (query, key, value)]
    ours = flashattn.sdpa(*leaves, attn_mask=mask)
    assert not ours[:, :, [1, 9]].any() and torch.isfinite(ours).all()
    dout = torch.randn(ours.shape, generator=torch.Generator().manual_seed(9))
    dout[:, :, [1, 9]] = 0  # what torch's backward makes of those rows is its own affair
    ours_grads = torch.autograd.grad(ours, leaves, dout)
    with sdpa_kernel([SDPBackend.MATH]):
        theirs = F.scaled_dot_product_attention(*leaves, attn_mask=mask)
    seen = rows_with_keys(theirs, mask)
    torch.testing.assert_close(ours * seen, theirs * seen, rtol=1e-5, atol=1e-5)
    for name, a, b in zip(("dq", "dk", "dv"), ours_grads,
                          torch.autograd.grad(theirs, leaves, dout)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=name)


def test_sdpa_under_torch_compile_with_a_mask():
    query, key, value, mask = sdpa_inputs("float32", "b11k", {})

    def call(q, k, v, m):
        return flashattn.sdpa(q, k, v, attn_mask=m.expand(2, 4, 11, 13))
    torch._dynamo.reset()
    compiled = torch.compile(call, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(query, key, value, mask),
                               call(query, key, value, mask), rtol=0, atol=0)


# ---- errors ----------------------------------------------------------------------------------

SHAPE_RULE = r"must broadcast to \(batch, heads_q, seqlen_q, seqlen_k\) = \(1, 4, 5, 6\)"
ERRORS = [
    ("numpy", lambda m: m.numpy(), TypeError, "attn_mask: is a numpy.ndarray"),
    ("float64", lambda m: m.double(), ValueError,
     "attn_mask: dtype is torch.float64, must be torch.bool"),
    ("int", lambda m: m.int(), ValueError, "attn_mask: dtype is torch.int32"),
    ("uint8", lambda m: m.to(torch.uint8), ValueError, "attn_mask: dtype is torch.uint8"),
    ("keys", lambda m: m[:, :5], ValueError, r"attn_mask: has shape \(5, 5\), " + SHAPE_RULE),
    ("kv_heads", lambda m: m.expand(2, 5, 6), ValueError, r"attn_mask: has shape \(2, 5, 6\)"),
    ("one_dim", lambda m: m[0], ValueError, r"attn_mask: has shape \(6,\)"),
    ("five_dims", lambda m: m[None, None, None], ValueError,
     r"attn_mask: has shape \(1, 1, 1, 5, 6\)"),
    ("device", lambda m: m.to("meta"), ValueError,
     r"attn_mask: device is meta, must be q's device \(cpu\)"),
]


@pytest.mark.parametrize("call", ["fwd", "bwd", "sdpa"])
@pytest.mark.parametrize("change,error,words", [e[1:] for e in ERRORS],
                         ids=[e[0] for e in ERRORS])
def test_mask_errors_name_the_argument(change, error, words, call):
    q, k, v = random_bshd(1, 5, 6, 4, 2, 8, seed=10)
    mask = change(torch.ones(5, 6, dtype=torch.bool))
    with pytest.raises(error, match=words.replace("q's", "query's" if call == "sdpa" else "q's")):
        if call == "bwd":
            out, lse = flashattn.attention(q, k, v, return_lse=True)
            flashattn.attention_backward(q, k, v, out, torch.ones_like(out), lse,
                                         attn_mask=mask)
        elif call == "sdpa":
            flashattn.sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                           attn_mask=mask, enable_gqa=True)
        else:
            flashattn.attention(q, k, v, attn_mask=mask)


def test_a_mask_needs_a_nonzero_scale():
    q, k, v = random_bshd(1, 5, 6, 2, 2, 8, seed=11)
    for mask in (torch.zeros(5, 6), torch.ones(5, 6, dtype=torch.bool)):
        with pytest.raises(flashattn.InvalidArgumentError, match="scale: is 0"):
            flashattn.attention(q.requires_grad_(), k, v, scale=0.0,
                                attn_mask=mask)  # through the op
