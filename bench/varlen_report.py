"""The varlen grid's tables (bench/run --grids varlen; results["varlen_rows"], one row per
point as varlen_grid.VarlenPoint.row makes it): per pass, each batch's calls in TFLOP/s,
ours over PyTorch's fastest way to run the batch and over the dense kernel at the mean
length, with the grid's headline ratios."""
from result_rows import PASS_NAMES, ratio_summary, scope, sig

ROWS = "varlen_rows"

VARLEN_NOTE = (
    "Causal batches of sequences whose lengths follow a log-normal spread around 1024 "
    "(bench/varlen_grid.py), bf16, 32 query heads on 8 kv heads, head dim 128. "
    "`flashattn varlen`: the batch packed (`flashattn.varlen_attention`, max_seqlen given "
    "as FlashAttention's callers give it), unchecked (the prefix sums checked on the GPU, "
    "no host wait, as FlashAttention's call; the ratios take it) and checked (a host copy "
    "of the prefix sums, which waits for the stream), and unchecked on `cuda_mma` (the "
    "mma.sync kernels, forward and backward). PyTorch's ways: "
    "the batch padded to its longest sequence on each SDPA backend (padding rows computed "
    "and thrown away) and the sequences one by one; *vs PyTorch* is the fastest way's time "
    "over ours. *flashattn dense at mean length*: the same tokens as equal sequences of the "
    "mean length on the dense kernels (what packing should cost nothing against); *vs "
    "dense* is our TFLOP/s over the faster dense kernel's. TFLOP/s count each sequence's "
    "own work, 4·H·n²·d/2, 3.5× that for forward + backward.")


def measured(row):
    return row.get("ms") is not None


def ratio_pairs(results):
    """{label: [(a, b)]}, each ratio a / b, above 1 meaning ours is faster, per pass (scope:
    "varlen", "varlen fwd+bwd"): "flashattn/best ..." PyTorch's fastest way's time over
    ours; "flashattn/dense ..." our TFLOP/s over the faster dense kernel's at the mean
    length."""
    pairs = {}
    for row in filter(measured, results.get(ROWS, [])):
        where = scope("varlen", row["pass"])
        if row.get("torch_best_ms") is not None:
            pairs.setdefault(f"flashattn/best {where}", []).append((row["torch_best_ms"],
                                                                   row["ms"]))
        if row.get("dense_tflops") is not None:
            pairs.setdefault(f"flashattn/dense {where}", []).append((row["tflops"],
                                                                    row["dense_tflops"]))
    return pairs


def value_cell(entry):
    return sig(entry["tflops"]) if entry and entry["tflops"] is not None else "error"


def ratio_cell(row, key):
    return f"{sig(row[key], 3)}×" if row.get(key) is not None else ""


def pass_table(rows):
    """One line per batch of one pass: its shape, every call's TFLOP/s, the fastest
    PyTorch way and the faster dense kernel, and ours over each."""
    calls = list(dict.fromkeys(entry["call"] for row in rows for entry in row["calls"]))
    header = (["tokens", "sequences", "mean", "max"] + [f"{c} (TFLOP/s)" for c in calls] +
              ["PyTorch's fastest", "vs PyTorch", "vs dense"])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        entries = {entry["call"]: entry for entry in row["calls"]}
        cells = [str(row["tokens"]), str(row["sequences"]),
                 str(sum(row["lengths"]) // row["sequences"]), str(row["max_length"])]
        cells += [value_cell(entries.get(c)) for c in calls]
        cells += [row.get("torch_best", ""), ratio_cell(row, "speedup"),
                  ratio_cell(row, "of_dense")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def not_run(rows):
    """"call: why (at N batches)" for each call that failed somewhere."""
    failed = {}
    for row in rows:
        for entry in row["calls"]:
            if entry["tflops"] is None:
                failed.setdefault((entry["call"], entry["note"]), []).append(row["tokens"])
    return [f"- {call}: {why} ({len(at)} batch(es))" for (call, why), at in failed.items()]


def sections(results):
    """The Markdown sections of the varlen grid; [] without its rows."""
    rows = results.get(ROWS, [])
    parts = []
    for pass_ in PASS_NAMES:
        of_pass = [r for r in rows if r["pass"] == pass_]
        if of_pass:
            parts += ["", f"## Variable-length prefill: {PASS_NAMES[pass_]} (TFLOP/s)", "",
                      VARLEN_NOTE, "", pass_table(of_pass)]
            failed = not_run(of_pass)
            if failed:
                parts += ["", "Did not run:"] + failed
    if rows:
        parts += [""] + [f"- {ratio_summary(label, pairs, 'batches')}"
                         for label, pairs in ratio_pairs(results).items()]
    return parts
