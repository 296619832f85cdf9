"""Figures from one bench/run JSON, in the FlashAttention papers' manner: TFLOP/s against
sequence length, one panel per head dim and mask (and kv grouping, where a grid has
grouped-query points), one line per implementation (one figure per dtype); the fp32
exercise shapes as grouped bars; peak memory against seqlen.

Every axis that spans orders of magnitude is logarithmic: the slowest baselines run at a
thousandth of the fastest, and a linear axis would flatten them to zero.
"""
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator  # noqa: E402

from result_rows import (FLASHATTN, by_point, exercise_shape, family_of,  # noqa: E402
                         heads_kv_of, heads_of, impl_order, run_label, status_mark, timed)

MIB = 2**20
PALETTE = ["#d62728", "#ff7f0e", "#8c564b", "#1f77b4", "#2ca02c", "#9467bd", "#17becf",
           "#7f7f7f", "#bcbd22", "#e377c2"]


def styles(results):
    """A colour per implementation, the same in every figure; flashattn's drawn solid and
    thick, the alternatives dashed."""
    out = {}
    for i, impl in enumerate(impl_order(results, results["rows"])):
        ours = family_of(results, impl) == FLASHATTN
        out[impl] = dict(color=PALETTE[i % len(PALETTE)], linestyle="-" if ours else "--",
                         linewidth=2.2 if ours else 1.4, marker="o" if ours else "s",
                         markersize=4)
    return out


def seqlen_axis(ax, seqlens):
    ax.set_xscale("log", base=2)
    ax.set_xticks(seqlens)
    ax.xaxis.set_major_formatter(
        FuncFormatter(lambda x, _: f"{x / 1024:g}k" if x >= 1024 else f"{x:g}"))
    ax.minorticks_off()
    ax.set_xlabel("sequence length")


def figure_legend(fig, axes):
    handles, labels = {}, []
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in handles:
                handles[label] = h
                labels.append(label)
    fig.legend([handles[n] for n in labels], labels, loc="lower center", ncol=len(labels),
               frameon=False, bbox_to_anchor=(0.5, 0.0))


WHAT = {"fwd": "forward", "bwd": "backward alone", "fwd+bwd": "forward + backward"}


PAPER_SHAPES = "batch × seqlen = 16k tokens, heads × head dim = 2048"
WIDE_SHAPES = "batch × seqlen = 16k tokens, 8 query heads on 8 or 4 kv heads"


def group_size(row):
    """Query heads per kv head: 1 without grouped-query attention."""
    return row["heads_q"] // heads_kv_of(row)


def paper_figure(results, dtype, path, grid="paper", pass_="fwd", shapes=PAPER_SHAPES):
    rows = [r for r in results["rows"]
            if r["grid"] == grid and r["dtype"] == dtype and r.get("pass", "fwd") == pass_]
    head_dims = sorted({r["head_dim"] for r in rows})
    groups = sorted({group_size(r) for r in rows})
    panel_rows = [(m, g) for m in ("none", "top_left") for g in groups
                  if any(r["causal"] == m and group_size(r) == g for r in rows)]
    seqlens = sorted({r["seqlen_q"] for r in rows})
    style = styles(results)
    ceiling = results["ceilings"]["bf16_matmul_tflops"]
    fig, axes = plt.subplots(len(panel_rows), len(head_dims), squeeze=False, sharey=True,
                             figsize=(4.6 * len(head_dims), 3.8 * len(panel_rows) + 0.8))
    for i, (mask, group) in enumerate(panel_rows):
        for j, d in enumerate(head_dims):
            ax = axes[i][j]
            panel = [r for r in rows
                     if r["causal"] == mask and r["head_dim"] == d and group_size(r) == group]
            series = defaultdict(list)
            for r in panel:
                if timed(r):
                    series[r["impl"]].append((r["seqlen_q"], r["tflops"]))
            for impl in style:
                if series.get(impl):
                    xs, ys = zip(*sorted(series[impl]))
                    ax.plot(xs, ys, label=impl, **style[impl])
            ax.axhline(ceiling, color="black", linestyle=":", linewidth=1,
                       label=f"bf16 matmul, measured ({ceiling:.0f})")
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(base=10))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
            ax.grid(True, which="major", alpha=0.3)
            seqlen_axis(ax, seqlens)
            heads = f", heads {heads_of(panel[0])}" if len(groups) > 1 and panel else ""
            ax.set_title(f"head dim {d}, {'causal' if mask != 'none' else 'not causal'}{heads}")
            if j == 0:
                ax.set_ylabel(f"TFLOP/s ({WHAT[pass_]})")
            if j == len(head_dims) - 1:
                right = ax.secondary_yaxis("right", functions=(lambda y: 100 * y / ceiling,
                                                               lambda p: p * ceiling / 100))
                right.yaxis.set_major_formatter(FuncFormatter(lambda p, _: f"{p:g}"))
                right.set_ylabel("% of the bf16 matmul rate")
    fig.suptitle(f"Attention {WHAT[pass_]}, {dtype}, {results['device']} ({shapes})")
    figure_legend(fig, axes.flat)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def exercise_figure(results, path, grid="exercise", pass_="fwd"):
    rows = [r for r in results["rows"] if r["grid"] == grid and r.get("pass", "fwd") == pass_]
    masks = [m for m in ("none", "top_left") if any(r["causal"] == m for r in rows)]
    style = styles(results)
    impls = [n for n in style if any(timed(r) for r in rows if r["impl"] == n)]
    absent = [n for n in style if n not in impls and any(r["impl"] == n for r in rows)]
    fig, axes = plt.subplots(len(masks), 1, squeeze=False, figsize=(14, 3.6 * len(masks) + 0.8))
    width = 0.8 / len(impls)
    for ax, mask in zip(axes[:, 0], masks):
        points = [(key, impl_rows) for key, impl_rows in by_point(rows, grid).items()
                  if key[6] == mask]
        for x, (key, impl_rows) in enumerate(points):
            for k, impl in enumerate(impls):
                r = impl_rows.get(impl)
                xpos = x - 0.4 + (k + 0.5) * width
                if timed(r):
                    ax.bar(xpos, r["ms"], width, color=style[impl]["color"])
                elif r is not None:
                    ax.text(xpos, 0.0, status_mark(r), rotation=90, fontsize=6,
                            ha="center", va="bottom", transform=ax.get_xaxis_transform())
        labels = ["{}\nd{}".format(*exercise_shape(next(iter(ir.values())))[:2])
                  for _, ir in points]
        ax.set_xticks(range(len(points)))
        ax.set_xticklabels(labels)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        ax.set_ylabel("ms (lower is better)")
        ax.set_xlabel("(N, d_model, h), head dim")
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_title(f"fp32 exercise shapes, {'causal' if mask != 'none' else 'not causal'} "
                     f"(n/a: declines fp32 or the head dim; skip: over the time limit)")
    fig.suptitle(f"Attention {WHAT[pass_]}, fp32, {results['device']}" +
                 (f"; not drawn (no fp32 run): {', '.join(absent)}" if absent else ""))
    fig.legend([Patch(color=style[n]["color"]) for n in impls], impls, loc="lower center",
               ncol=len(impls), frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def bytes_label(y, _):
    for unit, size in (("GiB", 2**30), ("MiB", MIB), ("KiB", 2**10)):
        if y >= size:
            return f"{y / size:g} {unit}"
    return f"{y:g} B"


def memory_figure(results, path):
    """Peak extra bytes against seqlen; an implementation's line ends where it ran out of
    memory, marked with an x at the top of the plot. 0 B is drawn at 1 KiB (log axis)."""
    rows = [r for r in results["rows"] if r["grid"] == "memory"]
    style = styles(results)
    seqlens = sorted({r["seqlen_q"] for r in rows})
    fig, ax = plt.subplots(figsize=(8.5, 5.5))
    oom_at = defaultdict(list)
    for impl in style:
        mine = sorted((r for r in rows if r["impl"] == impl), key=lambda r: r["seqlen_q"])
        ok = [(r["seqlen_q"], max(r["peak_extra_bytes"], 1024)) for r in mine
              if r["status"] == "ok"]
        if ok:
            ax.plot(*zip(*ok), label=impl, **style[impl])
        for r in mine:
            if r["status"] == "oom":
                oom_at[r["seqlen_q"]].append(impl)
    for n, impls in oom_at.items():
        for k, impl in enumerate(impls):
            ax.plot(n, 1.02 + 0.035 * k, marker="x", color=style[impl]["color"], markersize=8,
                    transform=ax.get_xaxis_transform(), clip_on=False, linestyle="")
        ax.annotate("OOM", (n, 1.02 + 0.035 * len(impls)), xycoords=("data", "axes fraction"),
                    ha="center", va="bottom", fontsize=7)
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_locator(LogLocator(base=1024))
    ax.yaxis.set_major_formatter(FuncFormatter(bytes_label))
    seqlen_axis(ax, seqlens)
    ax.set_ylabel("peak extra device memory")
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(f"One forward call, bf16, batch 1, 16 heads, head dim 128, not causal\n"
                 f"{results['device']} (x: out of memory; 0 B drawn at 1 KiB)", pad=30)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_all(results, stem):
    """Writes every figure the results have data for; returns {section: file name}."""
    names = {}
    grids = {r["grid"] for r in results["rows"]}
    if "paper" in grids:
        for dtype in sorted({r["dtype"] for r in results["rows"] if r["grid"] == "paper"}):
            path = stem.with_name(f"{stem.name}-paper-{dtype}.png")
            paper_figure(results, dtype, path)
            names[dtype] = path.name
    if "exercise" in grids:
        path = stem.with_name(f"{stem.name}-exercise.png")
        exercise_figure(results, path)
        names["exercise"] = path.name
    for pass_ in ("bwd", "fwd+bwd"):
        file_pass = pass_.replace("+", "")
        for grid, shapes in (("paper_bwd", PAPER_SHAPES), ("wide_bwd", WIDE_SHAPES)):
            dtypes = {r["dtype"] for r in results["rows"]
                      if r["grid"] == grid and r.get("pass") == pass_}
            for dtype in sorted(dtypes):
                path = stem.with_name(f"{stem.name}-{grid}-{file_pass}-{dtype}.png")
                paper_figure(results, dtype, path, grid, pass_, shapes)
                names[f"{grid} {pass_} {dtype}"] = path.name
        if any(r["grid"] == "exercise_bwd" and r.get("pass") == pass_ for r in results["rows"]):
            path = stem.with_name(f"{stem.name}-exercise_bwd-{file_pass}.png")
            exercise_figure(results, path, "exercise_bwd", pass_)
            names[f"exercise_bwd {pass_}"] = path.name
    if "memory" in grids:
        path = stem.with_name(f"{stem.name}-memory.png")
        memory_figure(results, path)
        names["memory"] = path.name
    return names


def history_figure(drawn, series, path):
    """The headline ratios over the runs (report.history_series: the runs drawn and, per
    series, (run index, [geometric mean, min, max, ...], interleaved)): a panel per series,
    the geometric mean with its min-max range, hollow markers for runs timed in a fixed order
    (before interleaved rounds; the order alone moved single points by up to 12%)."""
    keys = [k for k, points in series.items() if points]
    panels = max(len(keys), 1)
    fig, axes = plt.subplots(panels, 1, squeeze=False, sharex=True,
                             figsize=(max(8.0, 0.42 * len(drawn) + 2), 2.6 * panels + 1.4))
    for ax, key in zip(axes[:, 0], keys):
        xs = [i for i, _, _ in series[key]]
        geo = [e[0] for _, e, _ in series[key]]
        ax.vlines(xs, [e[1] for _, e, _ in series[key]], [e[2] for _, e, _ in series[key]],
                  color="#1f77b4", alpha=0.35, linewidth=4)
        ax.plot(xs, geo, color="#1f77b4", linewidth=1.2)
        for x, e, interleaved in series[key]:
            ax.plot(x, e[0], marker="o", markersize=6, color="#1f77b4",
                    markerfacecolor="#1f77b4" if interleaved else "white")
        last_x, last = series[key][-1][0], series[key][-1][1][0]
        ax.annotate(f"{last:.4g}×", (last_x, last), textcoords="offset points", xytext=(6, 4),
                    fontsize=8)
        ax.axhline(1.0, color="black", linestyle=":", linewidth=1)
        lows, highs = [e[1] for _, e, _ in series[key]], [e[2] for _, e, _ in series[key]]
        if max(highs) / min(lows) > 4:  # orders of magnitude: a log axis
            ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}×"))
        ax.grid(True, alpha=0.25)
        ax.set_title(f"{key}: geometric mean, bar from min to max over the points "
                     "(hollow: timed in a fixed order)", fontsize=9)
        ax.set_ylabel("their time / ours")
    axes[-1][0].set_xticks(range(len(drawn)))
    axes[-1][0].set_xticklabels([f"{run_label(line)} {(line['date'] or '')[5:10]}"
                                 for line in drawn], fontsize=7, rotation=90)
    axes[-1][0].set_xlabel("run (commit, date), oldest first; whole-grid runs only")
    fig.suptitle("Headline speed ratios over the benchmark runs (above 1: flashattn faster)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
