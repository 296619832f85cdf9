"""Host time per call of flashattn's PyTorch path beside PyTorch's SDPA, and where it goes.

A training step of a small model waits on the host, not the GPU: each attention call is a
few microseconds of kernels behind tens to hundreds of microseconds of Python, dispatch and
autograd. This times, per call over --calls calls (the GPU's work queued, waited for only
at the end), on (batch, heads, seqlen, head_dim) tensors in SDPA's layout, causal:
- flashattn.sdpa and torch's scaled_dot_product_attention: the forward without an autograd
  graph, with one, and forward + backward;
- the pieces of ours: the Python wrapper with the library call (_torch_op.run and
  run_backward), the library's calls alone (_library.forward and backward), three
  torch.empty (the gradients' allocation), and an identity torch.autograd.Function's forward
  + backward (what autograd costs any Python Function).
On CPU tensors the library's calls include the attention itself. --profile adds
torch.profiler's table of one forward + backward loop (CPU activities).

    python3 bench/host_time.py [--device cuda] [--shape 32,4,256,64] [--dtype bf16]
                               [--calls 300] [--profile]
"""
import argparse
import time

import torch
import torch.nn.functional as F

import flashattn
from flashattn import _library, _torch_op

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def host_us(call, calls, device):
    """Microseconds of host time per call: calls in a row, the device waited for only
    before and after."""
    for _ in range(20):
        call()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    elapsed = time.perf_counter() - start
    sync()
    return elapsed / calls * 1e6


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad


def calls_to_time(shape, dtype, device):
    """(name, call) pairs; each call does the same work every time."""
    make = lambda: torch.randn(shape, dtype=dtype, device=device)  # noqa: E731
    inputs = [make() for _ in range(3)]
    leaves = [x.clone().requires_grad_() for x in inputs]
    dout = make()
    named = []
    for name, sdpa in (("flashattn.sdpa", flashattn.sdpa),
                       ("torch sdpa", F.scaled_dot_product_attention)):
        def both(sdpa=sdpa):
            torch.autograd.backward(sdpa(*leaves, is_causal=True), dout)
        named += [(f"{name} forward", lambda sdpa=sdpa: sdpa(*inputs, is_causal=True)),
                  (f"{name} forward, graph", lambda sdpa=sdpa: sdpa(*leaves, is_causal=True)),
                  (f"{name} forward + backward", both)]
    # The op's layout, (batch, seqlen, heads, head_dim): views of the same memory.
    q, k, v, d = (x.transpose(1, 2) for x in (*inputs, dout))
    out, lse = _torch_op.run(q, k, v, True, "top_left", None, None, True)
    views = [_torch_op.kernel_tensor(t)[1] for t in (q, k, v, out, d)]
    grads = [torch.empty(t.shape, dtype=dtype, device=device) for t in (q, k, v)]
    grad_views = [_torch_op.kernel_tensor(t)[1] for t in grads]
    stream = _torch_op.current_stream(q.get_device()) if q.is_cuda else None
    leaf = inputs[0].clone().requires_grad_()
    # The views hold bare addresses: the library calls keep their tensors referenced.
    kept = (q, k, v, out, d, lse, grads)
    named += [
        ("_torch_op.run (forward)",
         lambda: _torch_op.run(q, k, v, True, "top_left", None, None, True)),
        ("_torch_op.run_backward",
         lambda: _torch_op.run_backward(d, q, k, v, out, lse, True, "top_left", None, None,
                                        False)),
        ("_library.forward alone",
         lambda kept=kept: _library.forward(*views[:4], lse=lse.data_ptr(),
                                            mask="causal_top_left", stream=stream)),
        ("_library.backward alone",
         lambda kept=kept: _library.backward(*views, lse.data_ptr(), *grad_views,
                                             mask="causal_top_left", stream=stream)),
        ("three torch.empty", lambda: [torch.empty(t.shape, dtype=dtype, device=device)
                                       for t in (q, k, v)]),
        ("identity Function forward + backward",
         lambda: torch.autograd.backward(Identity.apply(leaf), dout)),
    ]
    return named


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", default="32,4,256,64",
                        help="batch,heads,seqlen,head_dim (the training example's default)")
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    device = torch.device(args.device)
    shape = tuple(int(n) for n in args.shape.split(","))
    named = calls_to_time(shape, DTYPES[args.dtype], device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{where}; host time per call, {args.dtype} {shape} causal, {args.calls} calls")
    for name, call in named:
        print(f"{name:40s} {host_us(call, args.calls, device):9.1f} us", flush=True)
    if args.profile:
        activities = [torch.profiler.ProfilerActivity.CPU]
        with torch.profiler.profile(activities=activities) as prof:
            ours = dict(named)["flashattn.sdpa forward + backward"]
            for _ in range(50):
                ours()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


if __name__ == "__main__":
    main()
