"""The attention implementations the suite times, each a callable on the same inputs.

Inputs are stored (batch, seqlen, heads, head_dim), contiguous: flashattn's layout, the
FlashAttention API's, and the exercise's N × d_model row-major matrices. PyTorch's
(batch, heads, seqlen, head_dim) functions get transposed views of the same storage, as a
model with a fused QKV projection hands them. Every callable returns (batch, heads, seqlen,
head_dim_v) (a view where that is free) so outputs compare alike.

Grouped-query attention (grid wide_bwd): k and v have heads_kv heads, a divisor of q's
heads, query head h reading kv head h // (heads_q / heads_kv). flashattn takes such k and v
as they are; PyTorch's SDPA with enable_gqa=True (a backend without it declines the point,
and its row says why); standard attention repeats each kv head over its group first.

v's head_dim may differ from q's and k's (grid models: DeepSeek's multi-head latent
attention, 192 and 128); out and dout then have v's. Every implementation gets such inputs
as they are: a flashattn backend or an SDPA backend that needs one head_dim declines the
point (UnsupportedError, or SDPA's "No available kernel" with its reasons in the row).

The backward (grids paper_bwd, exercise_bwd, wide_bwd, variants): an implementation with
`gradients` prepares, for every input copy (q, k, v, dout), what its timed call needs and
returns call(i) -> (dq, dk, dv), each the shape of q, k, v. Pass "bwd" times the backward
alone: flashattn_backward on the forward's out and lse for ours, autograd.grad through a
graph kept from one forward (retain_graph) for PyTorch's. Pass "fwd+bwd" times a forward and
a backward through autograd, as a training step runs them.

The variants (grid variants, score_variants.py) reach every call as a Variants. flashattn
takes them as its keywords; PyTorch's SDPA as an additive attn_mask holding the window, the
causal mask and ALiBi's bias, made once per point where it fits (MASK_LIMIT_BYTES), so only
the backends that take a mask run (efficient, cuDNN, math); softcap has no SDPA form, and
standard attention here none of the variants: those decline the point (Declined), and the
report says why. A mask tensor (a bias or bool attn_mask) goes to flashattn as it is, beside
causal=True on a causal point; SDPA gets the same tensor, or on a causal point a copy with
the causal mask folded in (it takes no is_causal beside an explicit mask), made once per
point too; another build whose library predates attn_mask declines it.
"""
import contextlib
import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn
import score_variants
from flashattn import _library, _torch_op

FLASHATTN = "flashattn"
ALTERNATIVE = "alternative"

SDPA_BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                 "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}

# cuda_naive is one thread per query row: the obviously-right baseline, about 0.1 TFLOP/s.
SLOW_BACKENDS = ("cuda_naive",)
# Backwards timed only where one call is predicted to be short enough (--slow-limit-s), and
# their rate (TFLOP/s, backward FLOPs) before one has been seen: cuda_tiled's backward is
# fp32 arithmetic on CUDA cores.
SLOW_BACKWARDS = {"cuda_tiled": 1.0}
AUTO = "auto"  # flashattn's automatic choice (backend=None), as an implementation's name


class Declined(Exception):
    """An implementation cannot express a point's problem (a variant it lacks); the point's
    row says "unsupported" with this message."""


@dataclass
class Impl:
    name: str
    family: str                  # FLASHATTN or ALTERNATIVE
    call: Callable               # call(q, k, v, causal, variants=NONE) -> out (batch, heads,
    #                              seqlen, head_dim_v)
    context: Callable = contextlib.nullcontext  # entered around all calls of one point
    slow: bool = False           # the forward is skipped where one call would take too long
    gradients: Callable = None   # gradients(pass_, inputs, causal, variants=NONE) -> call(i);
    #                              None: no backward
    slow_backward_tflops: float = None  # the backward is slow: its prior rate (SlowRate)
    forward: bool = True         # timed on forward points too

    def runs(self, pass_):
        """Whether it takes part in points of this pass."""
        return self.forward if pass_ == "fwd" else self.gradients is not None

    def slow_prior(self, pass_):
        """The prior rate (TFLOP/s) of a pass that is skipped where too slow, else None."""
        if pass_ == "fwd":
            return SLOW_PRIOR_TFLOPS if self.slow else None
        return self.slow_backward_tflops


# A slow forward's rate (TFLOP/s) before it has been seen on a kind of point: cuda_naive's
# slowest measured earlier (bf16, head_dim 128), so predictions err towards skipping.
SLOW_PRIOR_TFLOPS = 0.075


def leaves(inputs):
    """Per input copy: q, k, v as fresh leaves that need a gradient, and dout."""
    return [(*(t.detach().requires_grad_() for t in copy[:3]), copy[3]) for copy in inputs]


def autograd_gradients(forward):
    """gradients() of a differentiable forward(q, k, v, causal, variants) -> (batch, heads,
    seqlen, head_dim_v): "bwd" runs autograd.grad through a graph kept from one forward per
    copy, "fwd+bwd" a forward and autograd.grad."""
    def gradients(pass_, inputs, causal, variants=score_variants.NONE):
        copies = leaves(inputs)
        if pass_ == "bwd":
            with torch.enable_grad():
                outs = [forward(q, k, v, causal, variants) for q, k, v, _ in copies]

            def call(i):
                q, k, v, dout = copies[i]
                return torch.autograd.grad(outs[i], (q, k, v), dout.transpose(1, 2),
                                           retain_graph=True)
            return call

        def step(i):
            q, k, v, dout = copies[i]
            with torch.enable_grad():
                out = forward(q, k, v, causal, variants)
            return torch.autograd.grad(out, (q, k, v), dout.transpose(1, 2))
        return step
    return gradients


def flashattn_gradients(backend):
    """gradients() of one flashattn backend (None: automatic): "bwd" calls
    flashattn.attention_backward on the out and lse of the automatic forward, computed once
    per copy; "fwd+bwd" runs flashattn.attention and its backward through autograd."""
    def gradients(pass_, inputs, causal, variants=score_variants.NONE):
        if pass_ == "fwd+bwd":
            return autograd_gradients(
                lambda q, k, v, c, vs: flashattn.attention(q, k, v, causal=c, backend=backend,
                                                           **vs.keywords())
                .transpose(1, 2))(pass_, inputs, causal, variants)
        saved = [flashattn.attention(q, k, v, causal=causal, return_lse=True,
                                     **variants.keywords())
                 for q, k, v, _ in inputs]

        def call(i):
            q, k, v, dout = inputs[i]
            out, lse = saved[i]
            return flashattn.attention_backward(q, k, v, out, dout, lse, causal=causal,
                                                backend=backend, **variants.keywords())
        return call
    return gradients


def flashattn_backends():
    """The GPU backends of the library the Python package loads, from its backend table."""
    return [b.name for b in flashattn.backends() if b.name.startswith("cuda_")]


def has_backward(backend):
    return {b.name: b.has_backward for b in flashattn.backends()}.get(backend, False)


def flashattn_impl(backend):
    """One backend by name, or AUTO: the library's choice for both passes. AUTO times only
    the backward grids (its forward is one of the backends, timed by name already)."""
    chosen = None if backend == AUTO else backend

    def call(q, k, v, causal, variants=score_variants.NONE):
        return flashattn.attention(q, k, v, causal=causal, backend=chosen,
                                   **variants.keywords()).transpose(1, 2)
    backward = backend == AUTO or has_backward(backend)
    return Impl(backend, FLASHATTN, call, slow=backend in SLOW_BACKENDS,
                gradients=flashattn_gradients(chosen) if backward else None,
                slow_backward_tflops=SLOW_BACKWARDS.get(backend), forward=backend != AUTO)


def build_impl(backend, build, path):
    """`backend` of another build of the library (the file at `path`), named backend@build.
    Counted among the alternatives, so that the report's ratios are this build's speed-up
    over that one. That build may predate the backend table: the name maps to its value
    through this build's table, and only flashattn_forward is called on the other one. It
    may predate attn_mask too: then it declines the points with a mask tensor. Where the
    backend has a backward here, that build's backward is timed too (its own forward's
    out and lse)."""
    lib = _library.load(path)
    reads_mask = reads_attn_mask(lib)

    def variant_keywords(variants):
        if variants.attn_mask is not None and not reads_mask:
            raise Declined(f"build {build}'s library predates attn_mask (it would ignore it)")
        if variants.dropout:
            raise Declined("the A/B builds time no dropout")
        (window_left, window_right), softcap = variants.window, variants.softcap
        return dict(window_left=window_left, window_right=window_right, softcap=softcap,
                    alibi_slopes=variants.alibi_slopes, attn_mask=variants.attn_mask)

    def forward(q, k, v, causal, variants, with_lse):
        return _torch_op.run(q, k, v, causal, "top_left", None, backend, with_lse, lib=lib,
                             **variant_keywords(variants))

    def call(q, k, v, causal, variants=score_variants.NONE):
        return forward(q, k, v, causal, variants, False)[0].transpose(1, 2)

    def gradients(pass_, inputs, causal, variants=score_variants.NONE):
        """As flashattn_gradients, every call in that build: "bwd" its backward on its own
        forward's out and lse, "fwd+bwd" its forward then its backward."""
        def backward(i, out, lse):
            q, k, v, dout = inputs[i]
            return _torch_op.run_backward(dout, q, k, v, out, lse, causal, "top_left", None,
                                          backend, False, lib=lib,
                                          **variant_keywords(variants))
        if pass_ == "fwd+bwd":
            return lambda i: backward(i, *forward(*inputs[i][:3], causal, variants, True))
        saved = [forward(q, k, v, causal, variants, True) for q, k, v, _ in inputs]
        return lambda i: backward(i, *saved[i])
    return Impl(f"{backend}@{build}", ALTERNATIVE, call, slow=backend in SLOW_BACKENDS,
                gradients=gradients if has_backward(backend) else None)


def reads_attn_mask(lib):
    """Whether a library applies attn_mask: one from before it reads only the fields of
    flashattn_variants it knows and would ignore the bias after them (the package asks it
    once, _library.knows_bias)."""
    return _library.knows_bias(lib)


def parse_builds(spec):
    """{name: path} from "NAME=PATH[,NAME=PATH...]"; raises SystemExit on a malformed one."""
    builds = {}
    for item in filter(None, (spec or "").split(",")):
        name, sep, path = item.partition("=")
        if not sep or not name or not path or "@" in name:
            raise SystemExit(f"--builds: {item!r} is not NAME=PATH (NAME without '@')")
        builds[name] = path
    return builds


def grouped(q, k):
    """Whether k has fewer heads than q (grouped-query attention)."""
    return k.shape[2] != q.shape[2]


def sdpa_mask(q, causal, variants):
    """The attn_mask of a point's variants (score_variants.sdpa_mask), made on the first
    call and kept on its Variants for the point's other calls; Declined where SDPA has no
    form of them or the mask would not fit."""
    if variants.softcap > 0:
        raise Declined("PyTorch's SDPA has no softcap: no PyTorch baseline")
    if variants.attn_mask is not None and variants.alibi_slopes is not None:
        raise Declined("the bench folds no ALiBi into an attn_mask tensor for SDPA")
    seqlen, heads = q.shape[1], q.shape[2]
    key = (seqlen, causal, q.dtype)
    if key not in variants.sdpa_masks:
        size = score_variants.sdpa_mask_bytes(seqlen, causal, heads, q.dtype, variants)
        if size > score_variants.MASK_LIMIT_BYTES:
            raise Declined(f"the attn_mask for SDPA would take {size / 2**30:.1f} GiB (over "
                           f"{score_variants.MASK_LIMIT_BYTES / 2**30:g} GiB)")
        variants.sdpa_masks[key] = score_variants.sdpa_mask(seqlen, causal, variants, q.dtype,
                                                             q.device)
    return variants.sdpa_masks[key]


def sdpa_impl(name, backend):
    def call(q, k, v, causal, variants=score_variants.NONE):
        mask = sdpa_mask(q, causal, variants) if variants.scores_vary() else None
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                              v.transpose(1, 2), attn_mask=mask,
                                              dropout_p=variants.dropout,
                                              is_causal=causal and mask is None,
                                              enable_gqa=grouped(q, k))
    return Impl(name, ALTERNATIVE, call, context=lambda: sdpa_kernel([backend]),
                gradients=autograd_gradients(call))


def standard_attention(q, k, v, causal, variants=score_variants.NONE):
    """softmax(q·kᵀ·scale)·v with the score matrix materialised, every step in the tensors'
    dtype: two cuBLAS matrix products around torch.softmax, as models wrote attention
    before fused kernels. The causal mask is built in the call, as a model without a cached
    mask buffer would. Grouped k and v are repeated over each group of query heads, as
    models without a fused kernel do (autograd sums dk and dv back over the group). No
    variants: SDPA's math backend with the mask is the materialised baseline there."""
    if variants.any():
        raise Declined("standard attention here has no variants (math SDPA with the mask "
                       "is the materialised baseline)")
    if grouped(q, k):
        group = q.shape[2] // k.shape[2]
        k, v = (t.repeat_interleave(group, dim=2) for t in (k, v))
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = torch.matmul(q * scale, k.transpose(-2, -1))
    if causal:
        seqlen_q, seqlen_k = s.shape[-2:]
        hidden = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=s.device).triu_(1)
        s.masked_fill_(hidden, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def all_impls(builds=None):
    """Every implementation; `builds` ({name: library path}) adds each flashattn backend of
    each of those builds."""
    impls = [flashattn_impl(AUTO)] + [flashattn_impl(b) for b in flashattn_backends()]
    impls += [build_impl(b, name, path) for name, path in (builds or {}).items()
              for b in flashattn_backends()]
    impls += [sdpa_impl(name, backend) for name, backend in SDPA_BACKENDS.items()]
    impls.append(Impl("standard_cublas", ALTERNATIVE, standard_attention,
                      gradients=autograd_gradients(standard_attention)))
    return impls


def select(impls, names):
    """The impls named (in the given order); raises on an unknown name."""
    by_name = {impl.name: impl for impl in impls}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown impl(s) {unknown}; known: {sorted(by_name)}")
    return [by_name[n] for n in names]
