"""The decode table: decode.py's columns, shared by its own Markdown and by bench/run's
report of the decode grid (results["decode_rows"], one row per config and cache layout, as
decode.run_config writes them), with the grid's headline ratios."""
from result_rows import ratio_summary

COLUMNS = [("point", "point", "{}"), ("layout", "layout", "{}"),
           ("flashattn µs", "flashattn_us", "{:.1f}"), ("TB/s", "tb_s", "{:.2f}"),
           ("of copy", "of_copy", "{:.0%}"), ("checked µs", "checked_us", "{:.1f}"),
           ("graph µs", "graph_us", "{:.1f}"), ("graph/eager", "graph_over_eager", "{:.2f}"),
           ("host µs/call", "host_us", "{:.1f}"), ("SDPA µs", "sdpa_us", "{:.1f}"),
           ("SDPA + append µs", "sdpa_append_us", "{:.1f}"),
           ("SDPA backend", "sdpa_backend", "{}"), ("speedup", "speedup", "{:.2f}×"),
           ("vs SDPA alone", "speedup_attention_alone", "{:.2f}×"),
           ("paged/contig", "paged_over_contiguous", "{:.2f}"), ("rel L2", "rel_l2", "{:.1e}")]

NOTE = ("flashattn µs: GPU time of one unchecked step (checked=False), median. TB/s: "
        "KV bytes read (2·B·L·Hkv·d·element) over that time; of copy: its ratio to the "
        "measured copy bandwidth. checked µs: host wall time of a checked call (it waits "
        "for the stream). graph µs: replay of the unchecked step captured in a CUDA graph. "
        "host µs/call: Python and library time to issue one unchecked call. SDPA µs: "
        "PyTorch's fastest backend on the contiguous cache, the attention alone. SDPA + "
        "append µs: PyTorch doing the step's whole work, the new keys and values written "
        "into the cache (two slice copies) and then that backend's call. speedup: the same "
        "work's time (SDPA + append where the step appends, else SDPA) over flashattn µs; "
        "vs SDPA alone: SDPA µs over flashattn µs. paged/contig: this layout's flashattn µs "
        "over the contiguous cache's. rel L2: flashattn's output against SDPA's.")

GRID_NOTE = (
    "One step of `flashattn.attention_with_kvcache` (seqlen_q new queries per sequence, their "
    "keys and values appended, causal bottom-right) on a contiguous or paged cache "
    "(bench/decode.py's measurement; pages a random permutation of the pool), against "
    "PyTorch's SDPA backends on the contiguous cache's L keys (`enable_gqa`; the lower-right "
    "causal mask for seqlen_q > 1), the fastest that runs counting, timed alone and with "
    "the step's keys and values written into the cache first (the same work as the step: "
    "*speedup*). *of copy* is against this run's device-to-device copy ceiling.")

ROWS = "decode_rows"


def cell(row, key, fmt):
    value = row.get(key)
    return "–" if value is None else fmt.format(value)


def format_row(row):
    return " | ".join(f"{title} {cell(row, key, fmt)}" for title, key, fmt in COLUMNS)


def table_lines(rows):
    """The Markdown table of decode rows: a header, then one line per row."""
    lines = ["| " + " | ".join(title for title, _, _ in COLUMNS) + " |",
             "|" + "---|" * len(COLUMNS)]
    return lines + ["| " + " | ".join(cell(row, key, fmt) for _, key, fmt in COLUMNS) + " |"
                    for row in rows]


def measured(row):
    return row.get("flashattn_us") is not None


def same_work_us(row):
    """PyTorch's time for the step's whole work: its SDPA call after writing the step's keys
    and values into the cache, or the call alone where the step appends nothing (and in
    rows from before the append was timed)."""
    appended = row.get("sdpa_append_us")
    return row["sdpa_us"] if appended is None else appended


def ratio_pairs(results):
    """{label: [(a, b)]}, each ratio a / b, above 1 meaning the first-named is faster:
    "flashattn/best decode" (PyTorch's fastest SDPA doing the same work, its append
    included, over flashattn's time, every row, and "... decode paged" over the paged rows),
    "flashattn/best decode, attention alone" (the SDPA call alone), "flashattn/copy decode"
    (the KV bytes' time at the copy bandwidth over flashattn's: its fraction of copy) and
    "graph/eager decode" (the eager step's time over the CUDA graph replay's)."""
    pairs = {}
    for row in filter(measured, results.get(ROWS, [])):
        if row.get("sdpa_us") is not None:
            same = (same_work_us(row), row["flashattn_us"])
            pairs.setdefault("flashattn/best decode", []).append(same)
            if row["layout"] != "contiguous":
                pairs.setdefault("flashattn/best decode paged", []).append(same)
            pairs.setdefault("flashattn/best decode, attention alone", []).append(
                (row["sdpa_us"], row["flashattn_us"]))
        pairs.setdefault("flashattn/copy decode", []).append((row["of_copy"], 1.0))
        pairs.setdefault("graph/eager decode", []).append((row["flashattn_us"], row["graph_us"]))
    return pairs


def sections(results):
    """The Markdown section of the decode grid; [] without its rows."""
    rows = results.get(ROWS, [])
    if not rows:
        return []
    parts = ["", "## Decode over a KV cache (µs, TB/s)", "", GRID_NOTE, ""] + table_lines(rows)
    missing = [f"{r['point']} {r['layout']} ({r['note']})" for r in rows if not measured(r)]
    if missing:
        parts += ["", "Not measured: " + "; ".join(missing) + "."]
    parts += ["", NOTE, ""]
    parts += [f"- {ratio_summary(label, pairs, 'rows')}"
              for label, pairs in ratio_pairs(results).items()]
    return parts
