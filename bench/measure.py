"""One point, every implementation: inputs and reference, then per implementation a
warm-up call and one call for peak extra memory and accuracy; on timed points, then, the
timed calls of all of them in interleaved rounds (time_in_rounds). A backward point's
call is its pass (implementations.py): the backward alone, or forward and backward; its
accuracy is that of dq, dk and dv. A point of the variants grid gives every call and the
reference its Variants (score_variants.py), made once for the point (its mask tensor too).

A row's "status" says what happened: "ok"; "unsupported" (the implementation declines the
dtype, a head_dim, v's head_dim other than q's, or a variant); "oom"
(torch.OutOfMemoryError); "skipped" (a slow implementation whose predicted time per call is
over the limit); "error" (anything else, message in "note").
"""
import gc
import random
import re
import statistics
import warnings

import torch

import accuracy
import flashattn
import implementations
import score_variants
import timing

# Calls shorter than this say more about launch overhead than about the rate.
SLOW_MIN_OBSERVED_MS = 20
# Timed calls come in rounds: each round times every implementation of the point once, in a
# fresh random order, with 1/TIMING_ROUNDS of the budget. The GPU's clock follows its recent
# power draw, so an implementation timed right after a light one runs faster than right after
# a heavy one: on the H100 the same kernel measured up to 12% apart depending on which
# implementation was timed just before it (docs/perf/cuda_wgmma.md, v4.9). Timed in one block
# each, in a fixed order, part of every ratio would be the order's.
TIMING_ROUNDS = 5


class SlowRate:
    """Predicts a slow implementation's time per call (Impl.slow_prior: cuda_naive's
    forward, cuda_tiled's backward) from its slowest rate seen on points of the same pass,
    dtype, head dims and mask (its rate falls steeply with head_dim), else its prior."""

    def __init__(self, limit_s):
        self.limit_s = limit_s
        self.tflops = {}

    @staticmethod
    def kind(point, impl):
        return (impl.name, point.pass_, point.dtype, point.head_dim, point.head_dim_v,
                point.causal)

    def rate(self, point, impl):
        return self.tflops.get(self.kind(point, impl), impl.slow_prior(point.pass_))

    def predicted_s(self, point, impl):
        return point.flops() / (self.rate(point, impl) * 1e12)

    def too_slow(self, point, impl):
        return (impl.slow_prior(point.pass_) is not None and
                self.predicted_s(point, impl) > self.limit_s)

    def observe(self, point, impl, ms):
        if impl.slow_prior(point.pass_) is not None and ms >= SLOW_MIN_OBSERVED_MS:
            tflops = point.flops() / (ms * 1e9)
            self.tflops[self.kind(point, impl)] = min(self.rate(point, impl), tflops)


def tensors_per_copy(point):
    """q, k, v; and dout for a backward point."""
    return 3 if point.pass_ == "fwd" else 4


def make_inputs(point, copies):
    """`copies` independent (q, k, v) sets, (q, k, v, dout) for a backward point, of fresh
    standard-normal data; k and v with the point's heads_kv heads, v and dout (out's shape)
    with its head_dim_v."""
    q_shape = (point.batch, point.seqlen, point.heads, point.head_dim)
    k_shape = (point.batch, point.seqlen, point.heads_kv, point.head_dim)
    v_shape, out_shape = (shape[:3] + (point.head_dim_v,) for shape in (k_shape, q_shape))
    shapes = (q_shape, k_shape, v_shape, out_shape)[:tensors_per_copy(point)]
    dtype = score_variants.TORCH_DTYPES[point.dtype]
    return [tuple(torch.randn(shape, dtype=dtype, device="cuda") for shape in shapes)
            for _ in range(copies)]


def operation(point, impl, inputs, variants):
    """call(i): what a point times, on input copy i; its preparation (a backward's saved
    forward) is done here, before any timing."""
    causal = point.causal != "none"
    if point.pass_ == "fwd":
        return lambda i: impl.call(*inputs[i], causal, variants)
    return impl.gradients(point.pass_, inputs, causal, variants)


def output_err(point, out, reference, rows):
    if point.pass_ == "fwd":
        return accuracy.rel_l2_err(out, reference, rows)
    return accuracy.gradients_err(out, reference, rows)


def base_row(point, impl):
    row = {"impl": impl.name, "family": impl.family, "grid": point.grid, "dtype": point.dtype,
           "batch": point.batch, "seqlen_q": point.seqlen, "seqlen_k": point.seqlen,
           "heads_q": point.heads, "heads_kv": point.heads_kv, "head_dim": point.head_dim,
           "head_dim_v": point.head_dim_v, "causal": point.causal, "pass": point.pass_,
           "ms": None, "tflops": None, "peak_extra_bytes": None, "rel_l2_err": None,
           "status": "ok"}
    if point.exercise:
        row["exercise"] = list(point.exercise)
    if point.name:
        row["model"] = point.name
    if point.variant_label():
        row.update(variant=point.variant_label(), window=point.window, softcap=point.softcap,
                   alibi=point.alibi, attn_mask=point.attn_mask, dropout=point.dropout)
    return row


def failure(exc, caught_warnings):
    """(status, note) for an exception from an implementation's call."""
    first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if isinstance(exc, torch.OutOfMemoryError):
        return "oom", first_line[:200]
    declined = isinstance(exc, (flashattn.UnsupportedError, flashattn.InvalidArgumentError,
                                implementations.Declined))
    if declined or "No available kernel" in first_line or "No viable backend" in first_line:
        return "unsupported", (sdpa_reasons(caught_warnings) or first_line)[:300]
    return "error", f"{type(exc).__name__}: {first_line}"[:300]


def sdpa_reasons(caught_warnings):
    """Why PyTorch's SDPA declined a backend: its warnings, less their headers ("... not used
    because:"), source locations and the lines about the backends switched off on purpose."""
    reasons = []
    for w in caught_warnings:
        text = re.sub(r"\s*\(Triggered internally at [^)]*\)\.?", "", str(w.message)).strip()
        if text and not text.endswith("because:") and "runtime disabled" not in text:
            if text not in reasons:
                reasons.append(text)
    return "; ".join(reasons[:3])


def guarded(row, work):
    """Runs work(); an exception becomes the row's status and note, and an out-of-memory
    failure hands the memory back."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            work()
        except Exception as exc:  # noqa: BLE001 - every failure becomes a row, the run goes on
            row["status"], row["note"] = failure(exc, caught)
    if row["status"] == "oom":
        release_memory()


def run_impl(point, impl, inputs, variants, reference, rows):
    """The row of one implementation at one point, before timing, and its call(i) (None if
    it failed). The first call is a warm-up (module loads, plans, workspaces); the second
    gives the peak extra memory, the accuracy and the estimate ("single_call_ms") that sizes
    the timed calls."""
    row = base_row(point, impl)
    calls = []

    def first_calls():
        with impl.context():
            call = operation(point, impl, inputs, variants)
            call(0)
            out, estimate, row["peak_extra_bytes"] = timing.measured_call(lambda: call(0))
            if reference is None:
                row["note"] = "dropout: no common reference (each library drops its own elements)"
            else:
                row["rel_l2_err"] = output_err(point, out, reference, rows)
                if row["rel_l2_err"] is None:
                    row["note"] = "output holds NaN or inf"
            del out
            row["single_call_ms"] = estimate
            calls.append(call)

    guarded(row, first_calls)
    return row, (calls[0] if calls else None)


def round_budget(budget, estimate_ms):
    """(rounds, budget per round) for calls of about estimate_ms: TIMING_ROUNDS rounds that
    share the budget's calls, at least two each, or else one round with all of them (slow
    calls, timed in the first round only)."""
    reps = budget.reps(estimate_ms)
    if reps < 2 * TIMING_ROUNDS:
        return 1, budget
    per_round = reps // TIMING_ROUNDS
    share = timing.Budget(ms=budget.ms / TIMING_ROUNDS, min_reps=per_round, max_reps=per_round,
                          slow_cap_ms=budget.slow_cap_ms)
    return TIMING_ROUNDS, share


def round_orders(names, rounds, seed):
    """The order of `names` in each of `rounds` rounds: a fresh random permutation per round,
    reproducible from `seed`."""
    rng = random.Random(seed)
    return [rng.sample(names, len(names)) for _ in range(rounds)]


def time_in_rounds(point, timed, inputs, budget):
    """Times the (impl, row, call) triples of `timed` in interleaved rounds (TIMING_ROUNDS)
    and fills each row's ms (the median of all its timed calls), spread, reps, host time and
    "round_medians_ms"."""
    plans = {impl.name: (impl, row, call, *round_budget(budget, row["single_call_ms"]))
             for impl, row, call in timed}
    rounds_done = {name: [] for name in plans}  # per round: (times, host_ms, queued_ahead)
    for r, order in enumerate(round_orders(list(plans), TIMING_ROUNDS, point.label())):
        for name in order:
            impl, row, call, rounds, share = plans[name]
            if r >= rounds or row["status"] != "ok":
                continue

            def timed_round():
                with impl.context():
                    rounds_done[name].append(timing.time_calls(
                        call, len(inputs), share, row["single_call_ms"]))

            guarded(row, timed_round)
    for name, (impl, row, _, _, _) in plans.items():
        done = rounds_done[name]
        if row["status"] != "ok" or not done:
            continue
        host = [h for _, h, _ in done if h is not None]
        ahead = [q for _, _, q in done if q is not None]
        row.update(timing.summary([t for times, _, _ in done for t in times],
                                  statistics.median(host) if host else None,
                                  all(ahead) if ahead else None))
        row["round_medians_ms"] = [statistics.median(times) for times, _, _ in done]
        row["tflops"] = point.flops() / (row["ms"] * 1e9)


def release_memory():
    """After an out-of-memory failure: drop the failed call's tensors (the traceback held
    them) and hand the allocator's cached blocks back, so the next call starts clean."""
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def measure_point(point, impls, budget, slow_rate):
    """Rows for every implementation in `impls` that takes part in `point`'s pass."""
    # q, k, v; a backward's copies also dout and out (and lse, or a kept graph).
    outs = 0 if point.pass_ == "fwd" else 2
    set_bytes = (point.tensor_bytes(point.heads, point.head_dim + outs * point.head_dim_v) +
                 point.tensor_bytes(point.heads_kv, point.head_dim + point.head_dim_v))
    copies = timing.copies_needed(set_bytes) if point.timed else 1
    inputs = make_inputs(point, copies)
    variants = score_variants.of_point(point)
    rows = accuracy.sample_rows(point.seqlen, "cuda")
    causal = point.causal != "none"
    # With dropout each library drops its own elements: no common reference (the tests
    # check flashattn's against the float64 reference given its keep mask).
    reference = (None if point.dropout
                 else accuracy.reference_rows(*inputs[0], causal, rows, variants)
                 if point.pass_ == "fwd"
                 else accuracy.reference_gradients(*inputs[0], causal, rows, variants))
    results = []
    timed = []
    for impl in (impl for impl in impls if impl.runs(point.pass_)):
        if slow_rate.too_slow(point, impl):
            row = base_row(point, impl)
            row["status"] = "skipped"
            predicted, rate = slow_rate.predicted_s(point, impl), slow_rate.rate(point, impl)
            row["note"] = (f"predicted {predicted:.0f} s per call at {rate:.3g} TFLOP/s, "
                           f"over the {slow_rate.limit_s:g} s limit")
        else:
            row, call = run_impl(point, impl, inputs, variants, reference, rows)
            if row["status"] == "ok":
                slow_rate.observe(point, impl, row["single_call_ms"])
            if point.timed and row["status"] == "ok":
                timed.append((impl, row, call))
        results.append(row)
    if timed:
        time_in_rounds(point, timed, inputs, budget)
    del inputs, variants, reference, timed  # the calls hold a backward's saved forward
    return results
