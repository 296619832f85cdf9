"""Ring attention over torch.distributed on the CPU: `world_size` processes on a gloo group,
each with its zigzag part of one sequence, forward and backward through autograd. Prints
one JSON line per rank: its out and gradients against the simulated ring's (same arithmetic,
same order: they must be equal), and the error each bad call raised. Run by
test_ring_distributed.py:  python3 ring_gloo.py WORLD_SIZE PORT"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import flashattn
from flashattn import _ring


def problem(world_size, head_dim_v=16):
    """q, k (head_dim 16), v and dout (head_dim_v) of one sequence."""
    g = torch.Generator().manual_seed(11)
    q = torch.randn(2, 4 * world_size, 4, 16, generator=g)
    k = torch.randn(2, 4 * world_size, 2, 16, generator=g)
    v = torch.randn(2, 4 * world_size, 2, head_dim_v, generator=g)
    return q, k, v, torch.randn((*q.shape[:3], head_dim_v), generator=g)


def simulated(parts, causal, layout=_ring.Dense):
    options = _ring.Options(causal, None, None, True)
    results = _ring.simulate(*parts[:3], options, layout)
    outs, lses = [r[0] for r in results], [r[1] for r in results]
    grads = _ring.simulate_backward(*parts[:3], outs, lses, parts[3], options, layout)
    return [(out, *g) for out, g in zip(outs, grads)]


def packed_report(rank, world_size):
    """The packed batch (sequences of 2W·{3, 1, 2} tokens): ring_attention equal to the
    simulated ring; a sequence that does not split, rejected on every rank."""
    cu = [0, 6 * world_size, 8 * world_size, 12 * world_size]
    g = torch.Generator().manual_seed(12)
    q = torch.randn(cu[-1], 4, 8, generator=g)
    k, v = (torch.randn(cu[-1], 2, 8, generator=g) for _ in range(2))
    dout = torch.randn(q.shape, generator=g)
    parts = [[flashattn.zigzag_shard_packed(t, cu, world_size, r)[None]
              for r in range(world_size)] for t in (q, k, v, dout)]
    cu_t = torch.tensor(cu, dtype=torch.int32)
    layout = _ring.Packed(torch.div(cu_t, 2 * world_size, rounding_mode="floor"), None)
    expected = simulated(parts, True, layout)[rank]
    qr, kr, vr = (p[rank][0].clone().requires_grad_() for p in parts[:3])
    out = flashattn.ring_attention(qr, kr, vr, causal=True, cu_seqlens=cu_t,
                                   deterministic=True)
    out.backward(parts[3][rank][0])
    got = (out.detach(), qr.grad, kr.grad, vr.grad)
    report = {"packed_equal_to_simulated": all(
        torch.equal(a, b[0]) for a, b in zip(got, expected))}
    bad = cu_t.clone()
    bad[1] += 1
    report["packed_bad_length"] = error_of(lambda: flashattn.ring_attention(
        qr.detach(), kr.detach(), vr.detach(), causal=True, cu_seqlens=bad))
    return report


def error_of(call):
    try:
        call()
    except flashattn.Error as e:
        return f"{type(e).__name__}: {e}"
    return None


def equal_to_simulated(rank, world_size, whole, causal):
    """Whether ring_attention's out and gradients through autograd equal the simulated
    ring's on this rank's zigzag part of `whole` (q, k, v, dout)."""
    parts = [[flashattn.zigzag_shard(t, world_size, r) for r in range(world_size)]
             for t in whole]
    expected = simulated(parts, causal)[rank]
    q, k, v = (p[rank].clone().requires_grad_() for p in parts[:3])
    out = flashattn.ring_attention(q, k, v, causal=causal, deterministic=True)
    out.backward(parts[3][rank])
    got = (out.detach(), q.grad, k.grad, v.grad)
    return all(torch.equal(a, b) for a, b in zip(got, expected))


def worker(rank, world_size, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    report = {"rank": rank}
    whole = problem(world_size)
    for causal in (True, False):
        report[f"equal_to_simulated_{'causal' if causal else 'full'}"] = equal_to_simulated(
            rank, world_size, whole, causal)
    # v of its own head_dim travels in the same block as k.
    report["head_dim_v_equal_to_simulated"] = equal_to_simulated(
        rank, world_size, problem(world_size, head_dim_v=24), True)
    report.update(packed_report(rank, world_size))
    q, k, v, _ = (flashattn.zigzag_shard(t, world_size, rank) for t in whole)
    shorter = 2 if rank == 0 else 0  # rank 0 passes a shorter part than the others
    report["uneven"] = error_of(lambda: flashattn.ring_attention(
        q[:, shorter:], k[:, shorter:], v[:, shorter:], causal=True))
    odd = 1 if rank == world_size - 1 else 0  # the last rank alone breaks a local rule
    report["odd"] = error_of(lambda: flashattn.ring_attention(
        q[:, odd:], k[:, odd:], v[:, odd:], causal=True))
    narrower = v[..., :8] if rank == 1 else v  # rank 1's v of another head_dim
    report["head_dim_v_differs"] = error_of(lambda: flashattn.ring_attention(
        q, k, narrower, causal=True))
    # One write of under 4 KiB: the ranks' lines cannot interleave on the shared pipe.
    os.write(1, (json.dumps(report) + "\n").encode())
    dist.barrier()  # every rank is done with the group
    # gloo's teardown (destroy_process_group, or the interpreter's exit) now and then aborts
    # on a joinable thread of its own (about one run in twenty here); the reports are out,
    # so the process leaves without it.
    os._exit(0)


if __name__ == "__main__":
    world_size, port = int(sys.argv[1]), int(sys.argv[2])
    mp.spawn(worker, args=(world_size, port), nprocs=world_size)
