"""Reading the rows of one bench/run JSON (and the lines of the run history): what the
tables (report.py) and the figures (plots.py) both need. It imports neither of them, and
plots.py does not import report.py, so the two no longer import each other."""
import math
from collections import defaultdict

from grid import Point, head_dims_label, heads_label

FLASHATTN = "flashattn"


# The grids of speed results, forward and backward (memory is a grid of its own kind).
SPEED_GRIDS = ("paper", "exercise", "wide", "paper_bwd", "exercise_bwd", "wide_bwd", "variants",
               "models", "models_bwd")
PASS_NAMES = {"fwd": "forward", "bwd": "backward alone", "fwd+bwd": "forward + backward"}


def pass_of(row):
    """What a row timed: "fwd", "bwd" or "fwd+bwd" (rows from before the backward: "fwd")."""
    return row.get("pass", "fwd")


def heads_kv_of(row):
    """A row's kv heads (rows from before grouped-query points may lack them: heads_q)."""
    return row.get("heads_kv") or row["heads_q"]


def head_dim_v_of(row):
    """A row's v head_dim (rows from before v's could differ from q's lack it: head_dim)."""
    return row.get("head_dim_v") or row["head_dim"]


def variant_of(row):
    """A row's variants as labels show them ("window(4096,0)", "softcap 30", "alibi",
    "documents (1,1,N,N) bool"), "" for plain attention."""
    return row.get("variant", "")


def model_of(row):
    """The model and layer a row measured (grids models, models_bwd), "" for the others."""
    return row.get("model", "")


def point_key(row):
    """(grid, dtype, batch, seqlen, heads_q, head_dim, causal, pass, heads_kv, variant,
    model, head_dim_v): two models' layers of one shape stay two points."""
    return (row["grid"], row["dtype"], row["batch"], row["seqlen_q"], row["heads_q"],
            row["head_dim"], row["causal"], pass_of(row), heads_kv_of(row), variant_of(row),
            model_of(row), head_dim_v_of(row))


def point_of(row):
    """The grid.Point a row measured (its FLOPs and bytes)."""
    return Point(row["grid"], row["dtype"], row["batch"], row["seqlen_q"], row["heads_q"],
                 row["head_dim"], row["causal"], pass_=pass_of(row), heads_kv=row.get("heads_kv"),
                 window=tuple(row["window"]) if row.get("window") else None,
                 softcap=row.get("softcap", 0.0), alibi=row.get("alibi", False),
                 name=row.get("model"), attn_mask=row.get("attn_mask"),
                 head_dim_v=row.get("head_dim_v"))


def grouped(key):
    """Whether a point (its point_key) has grouped-query attention: fewer kv heads than
    query heads."""
    return key[8] != key[4]


def heads_of(row):
    """A row's heads as labels show them: "8", or "8/4" for 8 query heads on 4 kv heads."""
    return heads_label(row["heads_q"], heads_kv_of(row))


def head_dims_of(row):
    """A row's head dims as labels show them: "128", or "192/128" where v's differs."""
    return head_dims_label(row["head_dim"], head_dim_v_of(row))


def scope(grid, pass_):
    """A grid and pass as ratios and headlines name them: "paper", "paper bwd",
    "exercise fwd+bwd"."""
    base = grid.removesuffix("_bwd")
    return base if pass_ == "fwd" else f"{base} {pass_}"


def by_point(rows, grid):
    """{point key: {impl: row}} for one grid, in the order the run measured the points."""
    points = defaultdict(dict)
    for row in rows:
        if row["grid"] == grid:
            points[point_key(row)][row["impl"]] = row
    return points


def timed(row):
    return row is not None and row["status"] == "ok" and row["ms"] is not None


def best_alternative(impl_rows):
    """The fastest measured non-flashattn row at one point, or None."""
    alternatives = [r for r in impl_rows.values() if r["family"] != FLASHATTN and timed(r)]
    return min(alternatives, key=lambda r: r["ms"], default=None)


def impl_order(results, rows):
    """flashattn backends first, then the alternatives, as the run listed them."""
    present = {r["impl"] for r in rows}
    names = [n for n in results.get("impls", {}) if n in present]
    names += sorted(present - set(names))
    return ([n for n in names if family_of(results, n) == FLASHATTN] +
            [n for n in names if family_of(results, n) != FLASHATTN])


def family_of(results, impl):
    return results.get("impls", {}).get(impl, FLASHATTN if impl.startswith("cuda_") else "")


def sig(x, digits=3):
    """x to `digits` significant digits, with an exponent only below 0.001."""
    if x == 0:
        return "0"
    if abs(x) < 1e-3:
        return f"{x:.{digits - 1}e}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def status_mark(row):
    if row is None:
        return ""
    return {"unsupported": "n/a", "oom": "OOM", "skipped": "skip", "error": "error"}.get(
        row["status"], "")


def table(header, body):
    """A Markdown table: a header row, then one row of cells per line of `body`."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in body])


def exercise_shape(row):
    n, d_model, h = row.get("exercise") or (row["seqlen_q"], row["heads_q"] * row["head_dim"],
                                            row["heads_q"])
    return [f"({n}, {d_model}, {h})", str(row["head_dim"]),
            "causal" if row["causal"] != "none" else ""]


def geomean(values):
    return math.exp(sum(map(math.log, values)) / len(values))


def ratio_summary(label, pairs, unit="points"):
    """"flashattn/best decode 0.55× (0.38-0.76) over 38 rows, 2 at or above 1": the
    geometric mean and range of a / b over (a, b) pairs."""
    ratios = [a / b for a, b in pairs]
    return (f"{label} {sig(geomean(ratios), 2)}× ({sig(min(ratios), 2)}-"
            f"{sig(max(ratios), 2)}) over {len(ratios)} {unit}, "
            f"{sum(r >= 1 for r in ratios)} at or above 1")


def run_label(line):
    """A history line's short name: its commit, with what its file name adds after the
    commit (3abd1ad-rounds3)."""
    stem, commit = (line.get("file") or "").removesuffix(".json"), line.get("commit") or "?"
    return stem[stem.index(commit):] if commit in stem else commit
