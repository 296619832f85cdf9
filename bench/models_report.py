"""The model-shape grids' tables (bench/run --grids models,models_bwd): one line per model
layer, named by its model, so that a line answers "is it faster for my model?": each
flashattn backend's TFLOP/s, the fastest alternative's name and TFLOP/s, each backend's
ratio to it and to cuDNN where cuDNN ran; under each table, per backend, at how many layers
it wins and which it loses."""
import model_shapes
from result_rows import (FLASHATTN, PASS_NAMES, best_alternative, by_point, family_of,
                         geomean, head_dims_of, heads_of, impl_order, model_of, pass_of, sig,
                         status_mark, table, timed)

# The grids and the pass each times.
GRIDS = {"models": "fwd", "models_bwd": "fwd+bwd"}
CUDNN = "cudnn"
REPORTED = "†"
# Layers a summary line names where a backend is slower, slowest first; the rest counted.
LISTED_LOSSES = 8

MODELS_NOTE = (
    "Attention layers of models as they run them (bench/model_shapes.py): batch, sequence "
    "length, query/kv heads (*32/8*: grouped-query attention; per GPU where the name says "
    "TP8), head dim (*192/128*: q's and k's, then v's, as in DeepSeek's multi-head latent "
    "attention; FLOPs count 2·B·H·N²·(192 + 128)), dtype and mask; lengths such as "
    "*4096+512* are image or video tokens plus the text tokens of joint attention. *vs "
    "best*: the fastest alternative's time over ours (above 1: ours is faster); the "
    "alternatives are PyTorch's SDPA backends (flash, efficient, cuDNN, math; grouped kv "
    "heads through `enable_gqa`, which a backend without it declines, as a backend that "
    "needs one head dim declines v's of its own) and standard attention on cuBLAS. *vs "
    f"cudnn*: cuDNN's time over ours, where cuDNN ran. {REPORTED}: a layer a user measured "
    "flashattn losing at.")

TRAINING_NOTE = (
    "A training step's attention: the forward and the backward through autograd (TFLOP/s "
    "count 3.5× the forward's FLOPs); `auto` is flashattn's automatic choice.")


def speed_ratio(theirs, ours):
    """Their time over ours, or None where either did not run (or is None)."""
    return theirs["ms"] / ours["ms"] if timed(theirs) and timed(ours) else None


def ratio_cell(ratio):
    return f"{sig(ratio, 2)}×" if ratio is not None else ""


def layer_name(row):
    name = model_of(row)
    return f"{name} {REPORTED}" if name in model_shapes.REPORTED_SLOW else name


def shape_cells(row):
    return [f"{row['batch']}×{row['seqlen_q']}", heads_of(row), head_dims_of(row),
            row["dtype"], "causal" if row["causal"] != "none" else ""]


def tflops_cell(row):
    return sig(row["tflops"]) if timed(row) else status_mark(row)


def columns(results, rows):
    """(ours, with_cudnn): the flashattn backends timed at some layer, and whether cuDNN
    was."""
    impls = [n for n in impl_order(results, rows) if any(timed(r) for r in rows if r["impl"] == n)]
    return [n for n in impls if family_of(results, n) == FLASHATTN], CUDNN in impls


def model_table(results, rows, grid):
    ours, with_cudnn = columns(results, rows)
    header = (["model layer", "batch×seqlen", "heads", "head dim", "dtype", "mask"] +
              [f"{n} (TFLOP/s)" for n in ours] + ["best alternative", "its TFLOP/s"] +
              [f"{n} vs best" for n in ours] +
              ([f"{n} vs cudnn" for n in ours] if with_cudnn else []))
    body = []
    for impl_rows in by_point(rows, grid).values():
        first = next(iter(impl_rows.values()))
        best = best_alternative(impl_rows)
        cells = [layer_name(first)] + shape_cells(first)
        cells += [tflops_cell(impl_rows.get(n)) for n in ours]
        cells += [best["impl"], sig(best["tflops"])] if best else ["", ""]
        cells += [ratio_cell(speed_ratio(best, impl_rows.get(n))) for n in ours]
        if with_cudnn:
            cells += [ratio_cell(speed_ratio(impl_rows.get(CUDNN), impl_rows.get(n)))
                      for n in ours]
        body.append(cells)
    return table(header, body)


def tally(ratios, against):
    """One backend against one alternative over the layers both ran: wins, geometric mean
    and range, and the layers it loses at, slowest first. ratios: [(name, ratio)]."""
    if not ratios:
        return ""
    values = [r for _, r in ratios]
    wins = sum(r >= 1 for r in values)
    text = (f"{wins} of {len(values)} layers at least as fast as {against} (geometric mean "
            f"{sig(geomean(values), 3)}×, {sig(min(values), 2)}-{sig(max(values), 2)}×)")
    losses = sorted((r, name) for name, r in ratios if r < 1)
    if losses:
        text += "; slower at " + ", ".join(f"{name} ({sig(r, 2)}×)"
                                           for r, name in losses[:LISTED_LOSSES])
    if len(losses) > LISTED_LOSSES:
        text += f" and {len(losses) - LISTED_LOSSES} more"
    return text


def summary(results, rows, grid):
    """Per flashattn backend, a line against the best alternative and one against cuDNN."""
    ours, _ = columns(results, rows)
    points = list(by_point(rows, grid).values())
    lines = []
    for n in ours:
        against_best, against_cudnn = [], []
        for impl_rows in points:
            name, mine = model_of(next(iter(impl_rows.values()))), impl_rows.get(n)
            for found, against in ((best_alternative(impl_rows), against_best),
                                   (impl_rows.get(CUDNN), against_cudnn)):
                ratio = speed_ratio(found, mine)
                if ratio is not None:
                    against.append((name, ratio))
        for ratios, alternative in ((against_best, "the best alternative"),
                                    (against_cudnn, "cuDNN")):
            if ratios:
                lines.append(f"- `{n}`: {tally(ratios, alternative)}.")
    return "\n".join(lines)


def sections(results):
    """The Markdown sections of the model-shape grids; [] without their rows."""
    parts = []
    for grid, pass_ in GRIDS.items():
        rows = [r for r in results["rows"] if r["grid"] == grid and pass_of(r) == pass_]
        if not rows:
            continue
        notes = [MODELS_NOTE] + (["", TRAINING_NOTE] if pass_ != "fwd" else [])
        parts += ["", f"## Model shapes: {PASS_NAMES[pass_]} (TFLOP/s)", ""] + notes
        parts += ["", model_table(results, rows, grid), "", summary(results, rows, grid)]
    return parts
