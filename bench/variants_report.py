"""The variants grid's tables (bench/run --grids variants): each variant (a mask tensor among
them) beside plain attention of the same shape on the same implementation (the target: at
most 5% slower), PyTorch's SDPA where it can express the problem, and the sliding window
beside the dense causal problem of the same work."""
from result_rows import (FLASHATTN, PASS_NAMES, best_alternative, by_point, family_of,
                         impl_order, pass_of, point_of, sig, status_mark, table, timed,
                         variant_of)

GRID = "variants"
# A variant may cost at most this much time over plain attention of the same shape.
TARGET = 1.05
# The dense problem of a window's work: the plain causal point whose FLOPs are within this
# fraction of the window's.
EQUAL_WORK = 0.02

VARIANTS_NOTE = (
    "bf16, head_dim 128, 16 heads, batch × seqlen = 16384 tokens. *vs plain*: the time over "
    "the same implementation's at the plain point of the same shape and mask (the target: "
    f"at most +{100 * (TARGET - 1):.0f}%; a window does less work, so it is below). "
    "PyTorch's SDPA gets the window, the causal mask and ALiBi's bias as one additive "
    "attn_mask, made once per point, where it takes at most 1 GiB; softcap has no SDPA form "
    "and no PyTorch baseline. A mask tensor (bias, key padding, documents: its shape over "
    "(batch, heads, seqlen_q, seqlen_k), N the seqlen, 1 a broadcast dimension) is "
    "flashattn's attn_mask and the same tensor is SDPA's, with the causal mask folded in on "
    "a causal point (ANDed into a bool mask), made once per point; its FLOPs are the plain "
    "point's, the keys it hides counted, so a kernel that skips the blocks a mask hides "
    "whole (the documents') can run below plain. n/a: the implementation cannot express "
    "the point (see *Not run*).")

WINDOW_NOTE = (
    "The causal sliding window (4096, 0) on 16384 tokens beside the dense causal problem "
    "whose visible (row, key) pairs are as many (FLOPs: 4·d·pairs·heads·batch; the dense "
    "seqlen is the multiple of 128 nearest equal work). A window kernel that skips the "
    "blocks outside it runs both at about the same TFLOP/s; a dense mask does not skip "
    "them.")


def shape_key(row):
    """What a variant point shares with its plain point: everything but the variants."""
    return (pass_of(row), row["dtype"], row["batch"], row["seqlen_q"], row["heads_q"],
            row["head_dim"], row["causal"])


def percent(ratio):
    return f"{100 * (ratio - 1):+.1f}%"


def variant_table(results, rows):
    """One line per point of one pass: each implementation's ms, ours against plain and
    against the best alternative."""
    impls = [n for n in impl_order(results, rows) if any(timed(r) for r in rows if r["impl"] == n)]
    ours = [n for n in impls if family_of(results, n) == FLASHATTN]
    alternatives = [n for n in impls if n not in ours]
    plain = {shape_key(r): {} for r in rows}
    for r in rows:
        if not variant_of(r):
            plain[shape_key(r)][r["impl"]] = r
    header = (["batch×seqlen", "mask", "variant"] + [f"{n} (ms)" for n in ours] +
              [f"{n} vs plain" for n in ours] + [f"{n} (ms)" for n in alternatives] +
              ["best alternative"] + [f"{n} vs best" for n in ours])
    body = []
    for impl_rows in by_point(rows, GRID).values():
        first = next(iter(impl_rows.values()))
        best = best_alternative(impl_rows)
        cells = [f"{first['batch']}×{first['seqlen_q']}",
                 "causal" if first["causal"] != "none" else "", variant_of(first) or "plain"]
        cells += [ms_cell(impl_rows.get(n)) for n in ours]
        for n in ours:
            r, base = impl_rows.get(n), plain[shape_key(first)].get(n)
            cells.append(percent(r["ms"] / base["ms"]) if variant_of(first) and timed(r) and
                         timed(base) else "")
        cells += [ms_cell(impl_rows.get(n)) for n in alternatives]
        cells.append(best["impl"] if best else "")
        cells += [f"{sig(best['ms'] / impl_rows[n]['ms'], 2)}×"
                  if best and timed(impl_rows.get(n)) else "" for n in ours]
        body.append(cells)
    return table(header, body)


def ms_cell(row):
    return sig(row["ms"]) if timed(row) else status_mark(row)


def window_table(results, rows):
    """Per pass and implementation: the window point and the dense causal point of its
    work, their times and TFLOP/s, and the ratios."""
    body = []
    for window in (r for r in rows if variant_of(r).startswith("window") and timed(r)):
        flops = point_of(window).flops()
        dense = [r for r in rows
                 if r["impl"] == window["impl"] and not variant_of(r) and timed(r) and
                 pass_of(r) == pass_of(window) and r["causal"] == window["causal"] and
                 abs(point_of(r).flops() / flops - 1) <= EQUAL_WORK]
        for r in dense:
            body.append([pass_of(window), window["impl"], sig(window["ms"]),
                         f"{r['batch']}×{r['seqlen_q']}", sig(r["ms"]),
                         f"{sig(window['ms'] / r['ms'], 3)}×", sig(window["tflops"]),
                         sig(r["tflops"]), f"{sig(window['tflops'] / r['tflops'], 3)}×"])
    if not body:
        return ""
    return table(["pass", "impl", "window (ms)", "dense batch×seqlen", "dense (ms)",
                  "time ratio", "window TFLOP/s", "dense TFLOP/s", "TFLOP/s ratio"], body)


def sections(results):
    """The Markdown sections of the variants grid; [] without its rows."""
    rows = [r for r in results["rows"] if r["grid"] == GRID]
    parts = []
    for pass_ in PASS_NAMES:
        of_pass = [r for r in rows if pass_of(r) == pass_]
        if of_pass:
            parts += ["", f"## Variants: {PASS_NAMES[pass_]} (ms)", "", VARIANTS_NOTE, "",
                      variant_table(results, of_pass)]
    window = window_table(results, rows)
    if window:
        parts += ["", "## Sliding window against the dense causal problem of the same work",
                  "", WINDOW_NOTE, "", window]
    return parts
