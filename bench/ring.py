"""Context parallelism: flashattn.ring_attention, forward and backward, against the whole
problem on one GPU, and the measurements the scaling model (docs/context-parallel.md) takes.

Two modes:

    python3 bench/ring.py simulate --out ring-1gpu.json   # one GPU, no communication
    python3 bench/ring.py ring --gpus 2 --out ring-2gpu.json  # one process per GPU, NCCL

`simulate` runs on one GPU: the whole problem (flashattn.attention and attention_backward,
causal) timed; the ring of W ranks simulated in one process (ranks as loop iterations,
flashattn._ring.simulate), whose total time over W is what W GPUs would take if the ring hid
its transfers (so whole / simulated total is the efficiency the decomposition allows); each
ring step's block timed alone and beside a copy of the step's transfer bytes on another
stream (by the copy engines, and by an SM kernel, as NCCL's transfers are), the overlap's
cost; and the errors of the whole and of the simulated ring against a float64 reference at a
smaller size, per tensor.

`ring` spawns one process per GPU (torch.multiprocessing, NCCL): rank 0 first times the whole
problem alone; then every rank runs ring_attention forward and backward on its zigzag part
(autograd, checked=False), timed from a barrier to a barrier; the gathered results are
compared with the whole problem's; the errors at the smaller size against float64; and the
exchange bandwidth of the ring (every rank sending a block to the next as it receives one).
Scaling efficiency = whole time / (W × ring time).

Both write one JSON object (--out) and print a summary. PYTHONPATH=python and
FLASHATTN_LIBRARY as for the other scripts.
"""
import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import flashattn
from flashattn import _ring, _ring_attention


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=("simulate", "ring"))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tokens", type=int, default=131072, help="sequence length (whole)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", default="bf16", choices=("bf16", "f16"))
    p.add_argument("--no-causal", dest="causal", action="store_false")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--worlds", default="2,4,8", help="simulate: ring sizes to simulate")
    p.add_argument("--gpus", type=int, default=2, help="ring: processes, one GPU each")
    p.add_argument("--accuracy-tokens", type=int, default=4096)
    return p.parse_args(argv)


DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def problem(args, tokens, seed, device):
    """q, k, v, dout of the whole sequence, the same on every process for the same seed."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = DTYPES[args.dtype]
    shape_q = (args.batch, tokens, args.heads, args.head_dim)
    shape_kv = (args.batch, tokens, args.kv_heads, args.head_dim)
    return [torch.randn(s, generator=g, device=device, dtype=dtype)
            for s in (shape_q, shape_kv, shape_kv, shape_q)]


def flops(args, tokens, passes=3.5):
    """Forward FLOPs 4·B·H·N²·d (halved for causal) times `passes` (3.5: forward+backward)."""
    f = 4 * args.batch * args.heads * tokens * tokens * args.head_dim * passes
    return f / 2 if args.causal else f


def timed(call, reps):
    """Median and spread (min, max) of call()'s wall time in ms, the GPU synchronised."""
    call()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return {"ms": statistics.median(times), "min": min(times), "max": max(times)}


def whole(args, q, k, v, dout):
    """The whole problem on one GPU: (out, dq, dk, dv)."""
    out, lse = flashattn.attention(q, k, v, causal=args.causal, return_lse=True)
    return (out, *flashattn.attention_backward(q, k, v, out, dout, lse, causal=args.causal))


def rel_l2(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def reference64(args, q, k, v, dout):
    """(out, dq, dk, dv) in float64 by plain autograd (small sizes only)."""
    q, k, v = (t.double().requires_grad_() for t in (q, k, v))
    group = args.heads // args.kv_heads
    kk, vv = (t.repeat_interleave(group, dim=2) for t in (k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) / args.head_dim ** 0.5
    if args.causal:
        n = q.shape[1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1),
                          float("-inf"))
    out = torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), vv)
    out.backward(dout.double())
    return out.detach(), q.grad, k.grad, v.grad


def shards(x, world, dim=1):
    return [flashattn.zigzag_shard(x, world, r, dim) for r in range(world)]


def simulated(args, parts):
    """Every rank's (out, dq, dk, dv) of the ring over `parts` (each rank's q, k, v, dout),
    simulated on one GPU."""
    options = _ring.Options(args.causal, None, None, False)
    qs, ks, vs, douts = parts
    results = _ring.simulate(qs, ks, vs, options)
    outs, lses = [r[0] for r in results], [r[1] for r in results]
    grads = _ring.simulate_backward(qs, ks, vs, outs, lses, douts, options)
    return [(out, *g) for out, g in zip(outs, grads)]


def unsharded(per_rank):
    """(out, dq, dk, dv) of the whole sequence from every rank's."""
    return [flashattn.zigzag_unshard([r[i] for r in per_rank]) for i in range(4)]


def accuracy(args, worlds, device):
    """Relative L2 errors against float64 at --accuracy-tokens: the whole problem's and each
    simulated ring's, per tensor."""
    q, k, v, dout = problem(args, args.accuracy_tokens, seed=7, device=device)
    ref = reference64(args, q, k, v, dout)
    names = ("out", "dq", "dk", "dv")
    rows = {"whole": dict(zip(names, map(rel_l2, whole(args, q, k, v, dout), ref)))}
    for world in worlds:
        parts = [shards(t, world) for t in (q, k, v, dout)]
        rows[f"ring{world}"] = dict(zip(names, map(rel_l2,
                                                   unsharded(simulated(args, parts)), ref)))
    return rows


PACKED_LENGTHS = (1040, 496, 2048, 512)  # multiples of 16: 2W chunks for W up to 8


def packed_problem(args, device):
    """A packed batch (sequences of PACKED_LENGTHS tokens), its prefix sums on the host and
    on the device, and its float64 reference per sequence."""
    q, k, v, dout = (t[0] for t in problem(args, sum(PACKED_LENGTHS), seed=9, device=device))
    cu = [0]
    for n in PACKED_LENGTHS:
        cu.append(cu[-1] + n)
    refs = [reference64(args, *(t[None, a:b] for t in (q, k, v, dout)))
            for a, b in zip(cu[:-1], cu[1:])]
    ref = [torch.cat([r[i][0] for r in refs]) for i in range(4)]
    return (q, k, v, dout), cu, torch.tensor(cu, dtype=torch.int32, device=device), ref


def packed_accuracy(args, worlds, device):
    """Relative L2 errors against float64 of a packed batch: varlen_attention on the whole
    batch and each simulated ring over it, per tensor."""
    (q, k, v, dout), cu, cu_t, ref = packed_problem(args, device)
    out, lse = flashattn.varlen_attention(q, k, v, cu_t, cu_t, causal=args.causal,
                                          return_lse=True)
    grads = flashattn.varlen_attention_backward(q, k, v, out, dout, lse, cu_t, cu_t,
                                                causal=args.causal)
    names = ("out", "dq", "dk", "dv")
    rows = {"whole": dict(zip(names, map(rel_l2, (out, *grads), ref)))}
    options = _ring.Options(args.causal, None, None, False)
    for world in worlds:
        parts = [[flashattn.zigzag_shard_packed(t, cu, world, r)[None] for r in range(world)]
                 for t in (q, k, v, dout)]
        layout = _ring.Packed(torch.div(cu_t, 2 * world, rounding_mode="floor"), None)
        results = _ring.simulate(*parts[:3], options, layout)
        outs, lses = [r[0] for r in results], [r[1] for r in results]
        per_rank = _ring.simulate_backward(*parts[:3], outs, lses, parts[3], options, layout)
        got = [flashattn.zigzag_unshard_packed([o[0] for o in outs], cu)]
        got += [flashattn.zigzag_unshard_packed([g[i][0] for g in per_rank], cu)
                for i in range(3)]
        rows[f"ring{world}"] = dict(zip(names, map(rel_l2, got, ref)))
    return rows


def block_times(args, parts):
    """Rank 0's two kinds of ring step, forward+backward alone, in ms: the diagonal block
    (its own keys, causal) and an off-diagonal one (local queries × half the local keys)."""
    q, k, v, dout = (t[0] for t in parts)
    half = q.shape[1] // 2
    cases = {"diagonal": (k, v, args.causal), "off-diagonal": (k[:, :half], v[:, :half], False)}
    return {name: timed(lambda: whole(argparse.Namespace(**{**vars(args), "causal": causal}),
                                      q, kb, vb, dout), args.reps)
            for name, (kb, vb, causal) in cases.items()}


def block_sweep(args, device):
    """An off-diagonal ring step's block (local queries × half as many keys, unmasked) at
    every local length from 256 to --tokens / 2: the forward (with lse) and the backward
    alone, in ms and TFLOP/s, the compute side of the scaling model."""
    rows = []
    local = 256
    while local <= args.tokens // 2:
        q, _, _, dout = problem(args, local, seed=3, device=device)
        _, k, v, _ = problem(args, local // 2, seed=4, device=device)
        out, lse = flashattn.attention(q, k, v, return_lse=True)
        fwd = timed(lambda: flashattn.attention(q, k, v, return_lse=True), args.reps)
        bwd = timed(lambda: flashattn.attention_backward(q, k, v, out, dout, lse), args.reps)
        work = 4 * args.batch * args.heads * local * (local // 2) * args.head_dim
        rows.append({"local_seqlen": local, "fwd_ms": fwd["ms"], "bwd_ms": bwd["ms"],
                     "fwd_tflops": work / fwd["ms"] / 1e9,
                     "bwd_tflops": 2.5 * work / bwd["ms"] / 1e9})
        local *= 2
    return rows


def overlap(args, parts):
    """Rank 0's off-diagonal step, forward+backward, alone and beside another stream that
    moves the step's transfer (the K/V block and its fp32 gradient accumulator), by the copy
    engines (copy_) and by an SM kernel (add, as NCCL moves data): once (the ring's volume;
    its exposed cost is the time over the block's alone) and over and over for as long as
    the block runs (a transfer that spans the step, as on a slow link)."""
    q, k, v, dout = (t[0] for t in parts)
    half = q.shape[1] // 2
    unmasked = argparse.Namespace(**{**vars(args), "causal": False})
    block = lambda: whole(unmasked, q, k[:, :half], v[:, :half], dout)
    step_bytes = 2 * k.numel() * (k.element_size() + 4)
    src = torch.empty(step_bytes // 2, dtype=torch.int16, device=q.device)
    dst = torch.empty_like(src)
    alone = timed(block, args.reps)
    results = {"alone": alone, "transfer_bytes": step_bytes}
    copies = {"copy engine": lambda: dst.copy_(src), "SM kernel": lambda: torch.add(src, 0, out=dst)}
    for how, copy in copies.items():
        copy_ms = timed(copy, args.reps)["ms"]
        results[how] = {"copy_ms": copy_ms, "copy_GB_s": step_bytes / copy_ms / 1e6}
        # A stream of high priority gets the SMs that free up first: the block's thread
        # blocks retire one by one and the copy's can start between them.
        for priority, side in (("", torch.cuda.Stream()),
                               (", high priority", torch.cuda.Stream(priority=-1))):
            for name, n in (("once", 1), ("spanning", max(1, round(alone["ms"] / copy_ms)))):
                def busy():
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        for _ in range(n):
                            copy()
                    block()
                    torch.cuda.current_stream().wait_stream(side)
                results[how][name + priority] = {**timed(busy, args.reps), "copies": n}
    return results


def simulate_mode(args):
    device = torch.device("cuda")
    q, k, v, dout = problem(args, args.tokens, seed=1, device=device)
    result = {"mode": "simulate", "config": config(args), "device": device_name(),
              "commit": commit()}
    result["whole"] = timed(lambda: whole(args, q, k, v, dout), args.reps)
    result["whole"]["tflops"] = flops(args, args.tokens) / result["whole"]["ms"] / 1e9
    result["simulated"] = {}
    worlds = [int(w) for w in args.worlds.split(",")]
    for world in worlds:
        parts = [shards(t, world) for t in (q, k, v, dout)]
        t = timed(lambda: simulated(args, parts), args.reps)
        t["efficiency_bound"] = result["whole"]["ms"] / t["ms"]
        t["blocks"] = block_times(args, parts)
        if world == 2:
            result["overlap"] = overlap(args, parts)
        result["simulated"][world] = t
        parts = None  # freed before the next ring size's
    q = k = v = dout = None  # freed before the sweep and the float64 references
    result["block_sweep"] = block_sweep(args, device)
    result["accuracy"] = accuracy(args, worlds, device)
    result["packed_accuracy"] = packed_accuracy(args, worlds, device)
    return result


def ring_worker(rank, args, port, queue):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.gpus, device_id=torch.device("cuda", rank))
    world, device = args.gpus, torch.device("cuda", rank)
    result = {"mode": "ring", "config": config(args), "device": device_name(),
              "commit": commit(), "gpus": world}
    q, k, v, dout = problem(args, args.tokens, seed=1, device=device)
    if rank == 0:
        result["whole"] = timed(lambda: whole(args, q, k, v, dout), args.reps)
        result["whole"]["tflops"] = flops(args, args.tokens) / result["whole"]["ms"] / 1e9
        reference = whole(args, q, k, v, dout)
    dist.barrier()
    parts = [flashattn.zigzag_shard(t, world, rank) for t in (q, k, v, dout)]
    q = k = v = dout = None  # this rank keeps its parts only
    qr, kr, vr = (t.requires_grad_() for t in parts[:3])

    def step(group=None, checked=False):
        for t in (qr, kr, vr):
            t.grad = None
        out = flashattn.ring_attention(qr, kr, vr, group=group, causal=args.causal,
                                       checked=checked)
        out.backward(parts[3])
        return out

    def synchronised_step(group=None):
        step(group)
        torch.cuda.synchronize()
        dist.barrier()

    dist.barrier()
    result["ring"] = timed(synchronised_step, args.reps)
    result["ring"]["tflops_per_gpu"] = (flops(args, args.tokens) / world
                                        / result["ring"]["ms"] / 1e9)
    options = dist.ProcessGroupNCCL.Options()
    options.is_high_priority_stream = True
    group = dist.new_group(backend="nccl", pg_options=options)
    dist.barrier()
    result["ring_high_priority"] = timed(lambda: synchronised_step(group), args.reps)
    out = step(checked=True)
    gathered = [gather(t, world, rank) for t in (out, qr.grad, kr.grad, vr.grad)]
    if rank == 0:
        names = ("out", "dq", "dk", "dv")
        result["ring_vs_whole"] = {n: rel_l2(flashattn.zigzag_unshard(g), r)
                                   for n, g, r in zip(names, gathered, reference)}
        result["efficiency"] = result["whole"]["ms"] / (world * result["ring"]["ms"])
        result["efficiency_high_priority"] = (result["whole"]["ms"]
                                              / (world * result["ring_high_priority"]["ms"]))
        del reference
    del gathered, out
    result["exchange"] = exchange_bandwidth(kr, world)
    result["accuracy"] = ring_accuracy(args, world, rank, device)
    result["packed_accuracy"] = ring_packed_accuracy(args, world, rank, device)
    if rank == 0:
        queue.put(result)
    dist.barrier()
    dist.destroy_process_group()


def gather(t, world, rank):
    parts = [torch.empty_like(t) for _ in range(world)] if rank == 0 else None
    dist.gather(t.detach().contiguous(), parts, dst=0)
    return parts


def exchange_bandwidth(like, world, reps=10):
    """GB/s each rank sends while receiving as much (the ring's exchange of a K/V block)."""
    if world == 1:
        return None
    block = torch.empty((2, *like.shape), dtype=like.dtype, device=like.device)
    spare = torch.empty_like(block)
    ring = _ring_attention.Ring(None)
    ring.finish(ring.start(block, spare))
    torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(reps):
        ring.finish(ring.start(block, spare))
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / reps
    return {"bytes": block.numel() * block.element_size(), "ms": seconds * 1e3,
            "GB_s": block.numel() * block.element_size() / seconds / 1e9}


def ring_accuracy(args, world, rank, device):
    """Errors against float64 at --accuracy-tokens of the whole problem and of the ring."""
    q, k, v, dout = problem(args, args.accuracy_tokens, seed=7, device=device)
    parts = [flashattn.zigzag_shard(t, world, rank) for t in (q, k, v, dout)]
    qr, kr, vr = (t.requires_grad_() for t in parts[:3])
    out = flashattn.ring_attention(qr, kr, vr, causal=args.causal)
    out.backward(parts[3])
    gathered = [gather(t, world, rank) for t in (out, qr.grad, kr.grad, vr.grad)]
    if rank != 0:
        return None
    names = ("out", "dq", "dk", "dv")
    ref = reference64(args, q, k, v, dout)
    return {"whole": dict(zip(names, map(rel_l2, whole(args, q, k, v, dout), ref))),
            f"ring{world}": {n: rel_l2(flashattn.zigzag_unshard(g), r)
                             for n, g, r in zip(names, gathered, ref)}}


def ring_packed_accuracy(args, world, rank, device):
    """Errors against float64 of a packed batch through ring_attention on the group."""
    (q, k, v, dout), cu, cu_t, ref = packed_problem(args, device)
    parts = [flashattn.zigzag_shard_packed(t, cu, world, rank) for t in (q, k, v, dout)]
    qr, kr, vr = (t.requires_grad_() for t in parts[:3])
    out = flashattn.ring_attention(qr, kr, vr, causal=args.causal, cu_seqlens=cu_t)
    out.backward(parts[3])
    gathered = [gather(t, world, rank) for t in (out, qr.grad, kr.grad, vr.grad)]
    if rank != 0:
        return None
    names = ("out", "dq", "dk", "dv")
    return {f"ring{world}": {n: rel_l2(flashattn.zigzag_unshard_packed(g, cu), r)
                             for n, g, r in zip(names, gathered, ref)}}


def ring_mode(args):
    if torch.cuda.device_count() < args.gpus:
        raise SystemExit(f"--gpus {args.gpus}: this machine has {torch.cuda.device_count()}")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    procs = [ctx.Process(target=ring_worker, args=(r, args, port, queue))
             for r in range(args.gpus)]
    for p in procs:
        p.start()
    result = queue.get()
    for p in procs:
        p.join()
    return result


def config(args):
    return {k: getattr(args, k) for k in ("tokens", "batch", "heads", "kv_heads", "head_dim",
                                          "dtype", "causal", "reps", "accuracy_tokens")}


def device_name():
    return torch.cuda.get_device_name()


def commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("FLASHATTN_COMMIT")


def main(argv=None):
    args = parse_args(argv)
    result = simulate_mode(args) if args.mode == "simulate" else ring_mode(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
