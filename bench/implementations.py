"""The attention implementations the suite times, each a callable on the same inputs.

Inputs are stored (batch, seqlen, heads, head_dim), contiguous: flashattn's layout, the
FlashAttention API's, and the exercise's N × d_model row-major matrices. PyTorch's
(batch, heads, seqlen, head_dim) functions get transposed views of the same storage, as a
model with a fused QKV projection hands them. Every callable returns (batch, heads, seqlen,
head_dim) (a view where that is free) so outputs compare alike.
"""
import contextlib
import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn
from flashattn import _library, _torch_op

FLASHATTN = "flashattn"
ALTERNATIVE = "alternative"

SDPA_BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                 "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}

# cuda_naive is one thread per query row: the obviously-right baseline, about 0.1 TFLOP/s.
SLOW_BACKENDS = ("cuda_naive",)


@dataclass
class Impl:
    name: str
    family: str                  # FLASHATTN or ALTERNATIVE
    call: Callable               # call(q, k, v, causal) -> out (batch, heads, seqlen, head_dim)
    context: Callable = contextlib.nullcontext  # entered around all calls of one point
    slow: bool = False           # skipped where one call would take too long


def flashattn_backends():
    """The GPU backends of the library the Python package loads, from its backend table."""
    return [b.name for b in flashattn.backends() if b.name.startswith("cuda_")]


def flashattn_impl(backend):
    def call(q, k, v, causal):
        return flashattn.attention(q, k, v, causal=causal, backend=backend).transpose(1, 2)
    return Impl(backend, FLASHATTN, call, slow=backend in SLOW_BACKENDS)


def build_impl(backend, build, path):
    """`backend` of another build of the library (the file at `path`), named backend@build.
    Counted among the alternatives, so that the report's ratios are this build's speed-up
    over that one. That build may predate the backend table: the name maps to its value
    through this build's table, and only flashattn_forward is called on the other one."""
    lib = _library.load(path)

    def call(q, k, v, causal):
        out, _ = _torch_op.run(q, k, v, causal, "top_left", None, backend, False, lib=lib)
        return out.transpose(1, 2)
    return Impl(f"{backend}@{build}", ALTERNATIVE, call, slow=backend in SLOW_BACKENDS)


def parse_builds(spec):
    """{name: path} from "NAME=PATH[,NAME=PATH...]"; raises SystemExit on a malformed one."""
    builds = {}
    for item in filter(None, (spec or "").split(",")):
        name, sep, path = item.partition("=")
        if not sep or not name or not path or "@" in name:
            raise SystemExit(f"--builds: {item!r} is not NAME=PATH (NAME without '@')")
        builds[name] = path
    return builds


def sdpa_impl(name, backend):
    def call(q, k, v, causal):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                              v.transpose(1, 2), is_causal=causal)
    return Impl(name, ALTERNATIVE, call, context=lambda: sdpa_kernel([backend]))


def standard_attention(q, k, v, causal):
    """softmax(q·kᵀ·scale)·v with the score matrix materialised, every step in the tensors'
    dtype: two cuBLAS matrix products around torch.softmax, as models wrote attention
    before fused kernels. The causal mask is built in the call, as a model without a cached
    mask buffer would."""
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
    impls = [flashattn_impl(b) for b in flashattn_backends()]
    impls += [build_impl(b, name, path) for name, path in (builds or {}).items()
              for b in flashattn_backends()]
    impls += [sdpa_impl(name, backend) for name, backend in SDPA_BACKENDS.items()]
    impls.append(Impl("standard_cublas", ALTERNATIVE, standard_attention))
    return impls


def select(impls, names):
    """The impls named (in the given order); raises on an unknown name."""
    by_name = {impl.name: impl for impl in impls}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown impl(s) {unknown}; known: {sorted(by_name)}")
    return [by_name[n] for n in names]
