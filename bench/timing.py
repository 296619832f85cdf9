"""GPU timing and memory: CUDA events, rotating inputs, peak extra memory, the two ceilings.

Each timed call is bracketed by its own pair of CUDA events and the host never waits in
between. A Python call can take longer to issue than a small kernel takes to run (flashattn's
wrapper about 0.1-0.2 ms), which would leave the GPU idle between events and time the host.
So before the timed calls the GPU is given a head start: a spin kernel long enough for the
host to queue all of them, and the events then measure GPU time alone. The host's time per
call is measured too and reported beside it. The median of the calls is the result; their
min and max are its spread.
"""
import math
import statistics
import time
from dataclasses import dataclass

import torch

# Inputs smaller than this many L2 caches are rotated among copies, so that no call finds
# its inputs left in L2 by the call before.
L2_MULTIPLE = 4
MAX_COPIES = 16
# Longest head start given to the GPU, ms (100 calls of 1 ms of host time each), and how
# many times a head start that proved too short is lengthened.
MAX_HEAD_START_MS = 200
HEAD_START_TRIES = 3


@dataclass
class Budget:
    """How many calls one (point, implementation) gets."""

    ms: float            # aim for about this much timed GPU time
    min_reps: int        # at least this many timed calls ...
    max_reps: int        # ... and at most this many
    slow_cap_ms: float   # ... unless they would outlast this: slow calls get fewer, down to one

    def reps(self, estimate_ms):
        n = min(self.max_reps, max(self.min_reps, int(self.ms / estimate_ms)))
        return max(1, min(n, int(self.slow_cap_ms / estimate_ms)))


def l2_bytes():
    return torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size


def copies_needed(set_bytes, l2=None):
    """Input copies to rotate among: enough that they span L2_MULTIPLE × L2."""
    l2 = l2_bytes() if l2 is None else l2
    return max(1, min(MAX_COPIES, math.ceil(L2_MULTIPLE * l2 / max(set_bytes, 1))))


def time_calls(call, copies, budget, estimate_ms):
    """Per-call GPU times in ms of `call(i)` (i picks the input copy, cycling); the host's
    time to issue one call, in ms; and whether every timed call was queued before the GPU
    reached it (so no timing includes host time). A single call, when the budget allows no
    more, is `estimate_ms` itself: (times, None, None).

    estimate_ms, one earlier call's time, sets the number of calls; calls short enough get a
    warm-up of about a quarter of the budget (clocks up, handle and plan caches filled),
    whose host time per call sizes the head start. A head start that proves too short is
    lengthened and the calls timed again.
    """
    reps = budget.reps(estimate_ms)
    if reps == 1:
        return [estimate_ms], None, None
    warmup = max(1, min(reps, int(budget.ms / 4 / estimate_ms)))
    start = time.perf_counter()
    for i in range(warmup):
        call(i % copies)
    host_ms = (time.perf_counter() - start) * 1e3 / warmup
    lead_ms = 2 * reps * host_ms + 1
    for _ in range(HEAD_START_TRIES):
        torch.cuda.synchronize()
        head_start(min(MAX_HEAD_START_MS, lead_ms))
        times, queued_ahead = timed(call, [i % copies for i in range(reps)])
        if queued_ahead:
            break
        lead_ms *= 4
    return times, host_ms, queued_ahead


def head_start(ms):
    """Keeps the GPU busy for about `ms` (a spin kernel), so work queued meanwhile runs back
    to back."""
    cycles_per_ms = torch.cuda.get_device_properties(torch.cuda.current_device()).clock_rate
    torch.cuda._sleep(int(ms * cycles_per_ms))


def timed(call, indices):
    """Per-call times, and whether the GPU had not yet reached the first call when the host
    had queued the last (then none of them waited for the host)."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in indices]
    ends = [torch.cuda.Event(enable_timing=True) for _ in indices]
    for start, end, i in zip(starts, ends, indices):
        start.record()
        call(i)
        end.record()
    queued_ahead = not starts[0].query()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in zip(starts, ends)], queued_ahead


def timed_once(call):
    """(call()'s result, its time in ms)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    out = call()
    end.record()
    end.synchronize()
    return out, start.elapsed_time(end)


def summary(times, host_ms, queued_ahead):
    return {"ms": statistics.median(times), "ms_min": min(times), "ms_max": max(times),
            "reps": len(times), "host_ms": host_ms, "queued_ahead": queued_ahead}


def output_bytes(out):
    """Bytes of the storage behind a tensor, or behind a tuple of them (gradients), each
    storage counted once."""
    storages = {}
    for t in out if isinstance(out, (tuple, list)) else (out,):
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def measured_call(call):
    """Runs call() once; returns (its output, its time in ms, the device memory it allocated
    beyond what was allocated before, not counting the output itself: a tensor, or a tuple
    of them). Run it after a warm-up call, so that one-time allocations (workspaces, plans)
    count as before."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out, ms = timed_once(call)
    return out, ms, torch.cuda.max_memory_allocated() - before - output_bytes(out)


def matmul_tflops(dtype, n=8192, budget=Budget(1000, 10, 300, 3000)):
    """Measured matrix rate: n³ torch.matmul on random data (2·n³ flops a call)."""
    a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
    torch.matmul(a, b)  # warm-up: cuBLAS handle and workspace
    estimate = timed_once(lambda: torch.matmul(a, b))[1]
    ms = statistics.median(time_calls(lambda i: torch.matmul(a, b), 1, budget, estimate)[0])
    return 2 * n**3 / (ms * 1e-3) / 1e12


def copy_tb_per_s(nbytes=2 << 30, budget=Budget(300, 10, 100, 3000)):
    """Measured device-to-device copy bandwidth, counting bytes read plus bytes written."""
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    estimate = timed_once(lambda: dst.copy_(src))[1]
    ms = statistics.median(time_calls(lambda i: dst.copy_(src), 1, budget, estimate)[0])
    return 2 * nbytes / (ms * 1e-3) / 1e12
