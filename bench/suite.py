"""The GPU side of bench/run: the two ceilings, then every grid point by point, into one
results dict in the project's benchmark schema (rewritten to disk after each point; the
decode and varlen grids' rows, script_grids.py, beside the others under their own keys)."""
import datetime
import json
import subprocess
import time

import torch
import triton

import accuracy
import measure
import timing
from result_rows import point_of


def driver_version():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


CEILINGS = ("bf16_matmul_tflops", "f32_matmul_tflops", "copy_tb_per_s")


def measure_ceilings():
    """The rates every result is a fraction of, measured in this run: bf16 and fp32 (no TF32)
    matrix products, and device-to-device copy bandwidth (bytes read + written)."""
    return {"bf16_matmul_tflops": timing.matmul_tflops(torch.bfloat16),
            "f32_matmul_tflops": timing.matmul_tflops(torch.float32),
            "copy_tb_per_s": timing.copy_tb_per_s(),
            "l2_bytes": timing.l2_bytes()}


def remeasure_ceilings(results):
    """At the end of a run, measures the ceilings again and keeps the higher reading of
    each: the same card's matrix rate has read 710 and 802 TFLOP/s in two runs, and a low
    reading would flatter every fraction. Recomputes every row's fraction."""
    again = measure_ceilings()
    ceilings = results["ceilings"]
    for key in CEILINGS:
        ceilings[f"{key}_readings"] = [ceilings[key], again[key]]
        ceilings[key] = max(ceilings[key], again[key])
    for row in results["rows"]:
        if row["ms"] is not None:
            add_ceiling_fraction(row, ceilings)
    for row in results.get("decode_rows", []):
        if row.get("tb_s") is not None:
            row["of_copy"] = row["tb_s"] / ceilings["copy_tb_per_s"]


def new_results(device, commit, mode, impls, budget, slow_limit_s, ceilings):
    return {
        "device": device,
        "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": mode,
        "environment": {"torch": torch.__version__, "cuda": torch.version.cuda,
                        "cudnn": torch.backends.cudnn.version(), "triton": triton.__version__,
                        "driver": driver_version(),
                        "fp32_matmul_tf32": torch.backends.cuda.matmul.allow_tf32},
        "ceilings": ceilings,
        "settings": {"budget": vars(budget), "slow_limit_s": slow_limit_s,
                     "sample_rows": accuracy.SAMPLE_ROWS,
                     "rotation": f"inputs rotated among copies spanning {timing.L2_MULTIPLE}× "
                                 f"L2 (at most {timing.MAX_COPIES})",
                     "timing_rounds": measure.TIMING_ROUNDS},
        "impls": {impl.name: impl.family for impl in impls},
        "rows": [],
    }


# The lists of rows in a results dict: the grids of Points, and those of the scripts' grids.
ROW_LISTS = ("rows", "decode_rows", "varlen_rows")


def write_json(results, path):
    """The results, one row per line; written aside and renamed, so the file on disk is
    always whole."""
    head = json.dumps({k: v for k, v in results.items() if k not in ROW_LISTS}, indent=1)
    lists = [f' "{key}": [\n' + ",\n".join("  " + json.dumps(row) for row in results[key]) +
             "\n ]" for key in ROW_LISTS if key in results]
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(head[:-2] + ",\n" + ",\n".join(lists) + "\n}\n")
    tmp.replace(path)


def add_ceiling_fraction(row, ceilings):
    """floor_ms: the larger of flops / matrix rate and bytes / copy bandwidth, a time no
    implementation can beat; fraction_of_ceiling = floor_ms / ms. fp32 points are held to
    the fp32 matrix rate, the others to bf16's (fp16's is the same on these GPUs)."""
    point = point_of(row)
    rate = ceilings["f32_matmul_tflops"] if point.dtype == "f32" else ceilings["bf16_matmul_tflops"]
    floor_ms = max(point.flops() / (rate * 1e9),
                   point.min_bytes() / (ceilings["copy_tb_per_s"] * 1e9))
    row["floor_ms"] = floor_ms
    row["fraction_of_ceiling"] = floor_ms / row["ms"]


def print_row(row):
    if row["status"] != "ok":
        print(f"    {row['impl']:<16} {row['status']}: {row.get('note', '')}", flush=True)
        return
    mem = f"peak extra {row['peak_extra_bytes'] / 2**20:9.1f} MiB"
    err = f"err {row['rel_l2_err']:.1e}" if row["rel_l2_err"] is not None else "err nan"
    if row["ms"] is None:
        print(f"    {row['impl']:<16} {mem}  {err}", flush=True)
        return
    host = f"host {row['host_ms']:.3f} ms/call" if row["host_ms"] is not None else ""
    ceiling = (f"{100 * row['fraction_of_ceiling']:5.1f}% of ceiling"
               if "fraction_of_ceiling" in row else "")
    print(f"    {row['impl']:<16} {row['ms']:9.4f} ms [{row['ms_min']:.4f}-{row['ms_max']:.4f}, "
          f"{row['reps']:3d} calls] {row['tflops']:8.2f} TFLOP/s "
          f"{ceiling}  {mem}  {err}  {host}", flush=True)


def run_grid(name, points, impls, budget, slow_rate, results, json_path, label=None):
    """Measures every point of one grid. In the memory grid an implementation that ran out
    of memory is not tried at the longer sequences that follow."""
    out_of_memory = set()
    start = time.time()
    label = label or name
    for point in points:
        print(f"[{label}] {point.label()}", flush=True)
        todo = [impl for impl in impls if impl.name not in out_of_memory]
        for row in measure.measure_point(point, todo, budget, slow_rate):
            if row["ms"] is not None and "ceilings" in results:
                add_ceiling_fraction(row, results["ceilings"])
            if name == "memory" and row["status"] == "oom":
                out_of_memory.add(row["impl"])
            print_row(row)
            results["rows"].append(row)
        if json_path:
            write_json(results, json_path)
    print(f"[{label}] {len(points)} points in {time.time() - start:.0f} s", flush=True)

