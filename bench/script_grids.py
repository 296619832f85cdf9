"""The GPU side of bench/run's decode and varlen grids (grid.SCRIPT_GRIDS), measured by the
standalone scripts' own code rather than measure.py's implementations: decode.run_config
(flashattn unchecked, checked and replayed from a CUDA graph, against PyTorch's fastest SDPA
backend) and varlen.measure (the packed batch against padded and per-sequence SDPA and the
dense kernels at the mean length). Each grid's rows go into the results under their own key,
"decode_rows" and "varlen_rows" (decode_report.py and varlen_report.py read them), rewritten
to disk after each point. They are measured once: --rounds repeats the other grids."""
import time

import torch

import decode
import decode_grid
import suite
import varlen


def run_grid(name, points, results, json_path):
    start = time.time()
    if name == "decode":
        run_decode(points, results, json_path)
    else:
        run_varlen(points, results, json_path)
    print(f"[{name}] {len(points)} points in {time.time() - start:.0f} s", flush=True)


def run_decode(points, results, json_path):
    """decode.py's rows of each config, its layouts together (PyTorch's SDPA timed once, on
    the contiguous cache), with decode.py's default settings; KV bandwidth against this
    run's copy ceiling. A config that runs out of memory leaves a row per layout saying so."""
    args = decode.parse_args([])
    rows = results.setdefault("decode_rows", [])
    for config in decode_grid.configs_of(points):
        layouts = ", ".join(map(decode_grid.layout_name, config.layouts))
        print(f"[decode] {config.name}: {layouts}", flush=True)
        try:
            found = decode.run_config(config, args, results["ceilings"]["copy_tb_per_s"])
        except torch.cuda.OutOfMemoryError as error:
            why = decode.out_of_memory(config, error)
            found = [dict(point=config.name, layout=decode_grid.layout_name(page), note=why)
                     for page in config.layouts]
        rows += [dict(row, grid="decode") for row in found]
        if json_path:
            suite.write_json(results, json_path)


def run_varlen(points, results, json_path):
    """varlen.py's calls on each point's batch, with autograd on for the backward (bench/run
    turns it off for the forward grids)."""
    rows = results.setdefault("varlen_rows", [])
    for point in points:
        print(f"[varlen] {point.label()}", flush=True)
        with torch.enable_grad():
            calls = varlen.measure(point.lengths(), point.pass_ == "fwd+bwd")
        torch.cuda.empty_cache()
        for name, ms, tflops, _ in calls:
            print(f"    {name:<44} {ms:9.3f} ms {tflops:7.1f} TFLOP/s", flush=True)
        rows.append(point.row(calls))
        if json_path:
            suite.write_json(results, json_path)
