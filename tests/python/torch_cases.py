"""Random torch inputs and the float64 reference for the PyTorch tests."""
import numpy as np
import pytest
import torch

import flashattn
from attention_reference import (alibi_bias, alignment, reference_attention, rel_l2,
                                 visible_keys)
from variant_cases import options_with_mask, options_with_slopes
from varlen_cases import packed_problem


def random_bshd(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, *, dtype=torch.float32,
                device="cpu", seed=0, head_dim_v=None):
    """q, k, v in flashattn's (batch, seqlen, heads, head_dim) layout; v of head_dim_v where
    given (default head_dim)."""
    generator = torch.Generator().manual_seed(seed)

    def draw(seqlen, heads, dim=head_dim):
        x = torch.randn(batch, seqlen, heads, dim, generator=generator)
        return x.to(device=device, dtype=dtype)
    return (draw(seqlen_q, heads_q), draw(seqlen_k, heads_kv),
            draw(seqlen_k, heads_kv, head_dim_v or head_dim))


def random_bhsd(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, **kwargs):
    """query, key, value in SDPA's (batch, heads, seqlen, head_dim) layout, contiguous."""
    return tuple(t.transpose(1, 2).contiguous()
                 for t in random_bshd(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim,
                                      **kwargs))


def as_float64(t):
    return t.detach().to(device="cpu", dtype=torch.float64).numpy()


def reference_bshd(q, k, v, **options):
    """The float64 reference (out, lse) for torch tensors in (batch, seqlen, heads, head_dim)."""
    return reference_attention(as_float64(q), as_float64(k), as_float64(v), **options)


def reference_bhsd(query, key, value, **options):
    """The float64 reference output in SDPA's layout (batch, heads, seqlen, head_dim)."""
    out, _ = reference_bshd(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                            **options)
    return np.ascontiguousarray(out.transpose(0, 2, 1, 3))


def causal_mask(seqlen_q, seqlen_k, alignment, device):
    """The boolean attn_mask (True: visible) of a causal alignment, for torch's SDPA;
    alignment None: every key visible."""
    if alignment is None:
        return torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    offset = 0 if alignment == "top_left" else seqlen_k - seqlen_q
    rows = torch.arange(seqlen_q, device=device)[:, None]
    return torch.arange(seqlen_k, device=device)[None, :] <= rows + offset


def plain_attention(q, k, v, *, causal=False, causal_alignment="top_left", scale=None,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, attn_mask=None):
    """Standard attention on (batch, seqlen, heads, head_dim) tensors, every step in their
    dtype and differentiable by torch: the scores materialised, through the variants as
    attention_reference defines them (attn_mask: a bool mask, or a float bias taken in q's
    dtype), grouped-query k and v repeated per query head. A row that sees no key, or whose
    every score attn_mask makes -inf, gives 0 (and no gradient)."""
    group = q.shape[2] // k.shape[2]
    k, v = (x.repeat_interleave(group, dim=2) for x in (k, v))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    if alibi_slopes is not None:
        off = alignment(seqlen_q, seqlen_k, causal, causal_alignment)
        bias = alibi_bias(as_float64(alibi_slopes), seqlen_q, seqlen_k, off)
        scores = scores + torch.from_numpy(bias).to(device=q.device, dtype=q.dtype)
    if attn_mask is not None:
        attn_mask = attn_mask.to(q.device)
        scores = (scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool
                  else scores + attn_mask.to(q.dtype))
    visible = torch.from_numpy(visible_keys(seqlen_q, seqlen_k, causal, causal_alignment,
                                            window_size)).to(q.device)
    scores = scores.masked_fill(~visible, float("-inf"))
    has_keys = (visible.any(dim=1)[:, None] if attn_mask is None
                else ~torch.isneginf(scores).all(dim=-1, keepdim=True))
    scores = scores.masked_fill(~has_keys, 0.0)
    probs = torch.softmax(scores, dim=-1).masked_fill(~has_keys, 0.0)
    return torch.einsum("bhqk,bkhd->bqhd", probs, v)


def plain_grads(q, k, v, dout, **options):
    """(dq, dk, dv) of plain_attention by torch's autograd, in the tensors' dtype."""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    return torch.autograd.grad(plain_attention(q, k, v, **options), (q, k, v), dout)



def autograd_grads(q, k, v, dout, **options):
    """(dq, dk, dv) of flashattn.attention through torch's autograd."""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    flashattn.attention(q, k, v, **options).backward(dout)
    return q.grad, k.grad, v.grad


def plain_outputs(q, k, v, dout=None, **options):
    """(out,) of plain_attention, or, given dout, its gradients (dq, dk, dv)."""
    if dout is None:
        return (plain_attention(q, k, v, **options),)
    return plain_grads(q, k, v, dout, **options)


def assert_as_accurate_as_plain(ours, inputs, *, plain=plain_outputs, **options):
    """ours: flashattn's (out,) for inputs (q, k, v), or its (dq, dk, dv) for inputs (q, k,
    v, dout), with `options`. fp32: each within 1e-5 (relative L2) of the plain formula in
    float64 (differentiated by torch's autograd). 16-bit: at most twice the error of the
    plain formula computed (and differentiated) by torch in that dtype, plus a quarter ulp;
    both against float64 on the same rounded inputs. plain: plain_outputs, or the same
    computation in another layout (a packed batch's: varlen_cases.per_sequence of it)."""
    dtype = inputs[0].dtype
    expected = plain(*(x.double() for x in inputs), **options)
    standard = plain(*inputs, **options) if dtype != torch.float32 else None
    names = ("dq", "dk", "dv") if len(inputs) == 4 else ("out",)
    for i, (name, got, want) in enumerate(zip(names, ours, expected)):
        assert got.dtype == dtype and got.shape == want.shape, name
        assert got.device == inputs[0].device, name
        err = rel_l2(as_float64(got), as_float64(want))
        if dtype == torch.float32:
            assert err <= 1e-5, name
        else:
            floor = torch.finfo(dtype).eps / 4
            assert err <= 2 * rel_l2(as_float64(standard[i]), as_float64(want)) + floor, name


def variant_case(case, heads=(4, 2), head_dim=32, dtype=torch.float32, device="cpu"):
    """q, k, v, dout and the options of one of variant_cases.CASES as torch tensors (batch 2,
    `heads` (q, kv), ALiBi's slopes on `device`)."""
    _, (seqlen_q, seqlen_k), options = case
    seed = seqlen_q + seqlen_k
    q, k, v = random_bshd(2, seqlen_q, seqlen_k, *heads, head_dim, dtype=dtype, device=device,
                          seed=seed)
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(seed + 1))
    return q, k, v, dout.to(device=device, dtype=dtype), options_with_slopes(
        options, heads[0], lambda slopes: torch.from_numpy(slopes).to(device))


def mask_case(case, heads=(4, 2), head_dim=32, dtype=torch.float32, device="cpu",
              bias_dtype=None):
    """variant_case for one of variant_cases.MASK_CASES: its attn_mask a torch tensor on
    `device` (a float bias in bias_dtype where given, else the case's dtype)."""
    q, k, v, dout, options = variant_case(case, heads, head_dim, dtype, device)

    def as_tensor(mask):
        mask = torch.from_numpy(mask).to(device)
        return mask.to(bias_dtype) if bias_dtype and mask.is_floating_point() else mask
    return q, k, v, dout, options_with_mask(options, q.shape[0], heads[0], q.shape[1],
                                            k.shape[1], as_tensor)


def varlen_case(case, heads=(4, 2), head_dim=16, dtype=torch.float32, device="cpu",
                head_dim_v=None):
    """q, k, v, dout (packed (total, heads, head_dim); v and dout of head_dim_v where given),
    cu_seqlens_q, cu_seqlens_k (int32) and the options of one of varlen_cases.CASES as torch
    tensors on `device`."""
    _, lengths, options = case
    *tensors, cu_seqlens_q, cu_seqlens_k = packed_problem(lengths, heads, head_dim,
                                                          seed=len(lengths),
                                                          head_dim_v=head_dim_v)
    q, k, v, dout = (torch.from_numpy(x).to(device=device, dtype=dtype) for x in tensors)
    cu_seqlens_q, cu_seqlens_k = (torch.from_numpy(cu).to(device)
                                  for cu in (cu_seqlens_q, cu_seqlens_k))
    return q, k, v, dout, cu_seqlens_q, cu_seqlens_k, options_with_slopes(
        options, heads[0], lambda slopes: torch.from_numpy(slopes).to(device))


def numpy_options(options):
    """options with ALiBi's slopes and attn_mask as NumPy arrays, for the NumPy reference and
    path (a bfloat16 bias as float32, which holds its values)."""
    arrays = {}
    for name in ("alibi_slopes", "attn_mask"):
        t = options.get(name)
        if t is not None:
            arrays[name] = (t.float() if t.dtype == torch.bfloat16 else t).cpu().numpy()
    return dict(options, **arrays)


def gpu_backends(backward=False):
    """(backend, dtype name) for each GPU backend (None: the automatic choice) and dtype it
    takes; with backward, those with a backward."""
    pairs = [(None, dtype) for dtype in ("f32", "f16", "bf16")]
    for b in flashattn.backends():
        if b.device == "cuda" and (b.has_backward or not backward):
            pairs += [(b.name, dtype) for dtype in b.dtypes]
    return pairs


def pair_id(pair):
    return f"{pair[0] or 'auto'}-{pair[1]}"


def skip_unless_runs(backend, head_dim, backward=False):
    """Skips a test of `backend` on a GPU it does not run on or beyond its head_dim limit."""
    if backend is None:
        return
    info = {b.name: b for b in flashattn.backends()}[backend]
    major, minor = torch.cuda.get_device_capability()
    if info.compute_capability and info.compute_capability != 10 * major + minor:
        pytest.skip(f"{backend} runs on compute capability {info.compute_capability / 10} only")
    limit = info.backward_max_head_dim if backward else info.max_head_dim
    if limit and head_dim > limit:
        pytest.skip(f"beyond {backend}'s head_dim limit {limit}")


def unless_unsupported(call):
    """call()'s result; a problem the backend declines skips the test with the library's
    reason."""
    try:
        return call()
    except flashattn.UnsupportedError as e:
        pytest.skip(f"unsupported: {e}")


def compiled_keeping_graphs(fn):
    """torch.compile(fn, fullgraph=True) through AOT autograd, and the list into which the
    forward and backward graphs' code is collected as they compile."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    graphs = []

    def keep(gm, _):
        graphs.append(gm.code)
        return make_boxed_func(gm.forward)
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True,
                         backend=aot_autograd(fw_compiler=keep, bw_compiler=keep)), graphs


def assert_compiled_training_step(loss_of, x, weight, key, value):
    """fullgraph=True through loss_of(x, key, value) (a loss of `weight`, key and value):
    the gradients equal eager's, and the forward and backward graphs call flashattn's
    two custom ops."""
    compiled, graphs = compiled_keeping_graphs(loss_of)
    compiled(x, key, value).backward()
    got = [t.grad.clone() for t in (weight, key, value)]
    for t in (weight, key, value):
        t.grad = None
    loss_of(x, key, value).backward()
    for ours, eager in zip(got, (weight, key, value)):
        torch.testing.assert_close(ours, eager.grad, rtol=1e-6, atol=1e-6)
    assert any("flashattn.attention_bwd" in code for code in graphs)
    assert any("flashattn.attention_fwd" in code for code in graphs)
