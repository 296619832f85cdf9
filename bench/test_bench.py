"""Tests of the benchmark's GPU-free parts: `python3 -m pytest bench -q`.

The grids and the report run on a synthetic results file in the schema bench/run writes;
with torch installed, the implementations' layouts and the float64 reference are checked on
the CPU (the timing itself needs a GPU and runs only there).
"""
import dataclasses
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grid  # noqa: E402
import report  # noqa: E402

# Synthetic rates (TFLOP/s) by implementation; None: declines fp32. flash and cudnn decline
# head dims over 256, efficient grouped-query attention (wide_bwd), flash v's head dim other
# than q's (MLA).
RATES = {"auto": 200.0, "cuda_naive": 0.1, "cuda_tiled": 12.0, "flash": (300.0, None),
         "efficient": 150.0, "cudnn": (550.0, None), "math": 20.0, "standard_cublas": 60.0}
FAMILIES = {n: "flashattn" if n.startswith("cuda_") or n == "auto" else "alternative"
            for n in RATES}
FORWARD_ONLY, BACKWARD_ONLY = {"cuda_naive"}, {"auto"}


def takes_part(point, impl):
    """As Impl.runs: cuda_naive has no backward; auto is timed on backward points only."""
    return impl not in (BACKWARD_ONLY if point.pass_ == "fwd" else FORWARD_ONLY)


# Variant points (grid variants): our rates fall by this factor with softcap, ALiBi or a
# mask tensor.
VARIANT_COST = 1.03


def synthetic_row(point, impl):
    row = {"impl": impl, "family": FAMILIES[impl], "grid": point.grid, "dtype": point.dtype,
           "batch": point.batch, "seqlen_q": point.seqlen, "seqlen_k": point.seqlen,
           "heads_q": point.heads, "heads_kv": point.heads_kv, "head_dim": point.head_dim,
           "head_dim_v": point.head_dim_v, "causal": point.causal, "pass": point.pass_,
           "ms": None, "tflops": None, "peak_extra_bytes": None, "rel_l2_err": None,
           "status": "ok"}
    if point.variant_label():
        row.update(variant=point.variant_label(), window=point.window, softcap=point.softcap,
                   alibi=point.alibi, attn_mask=point.attn_mask)
    if point.name:
        row["model"] = point.name
    rate = RATES[impl]
    if FAMILIES[impl] == "flashattn" and (point.softcap or point.alibi or point.attn_mask):
        rate = rate / VARIANT_COST
    if point.variant_label() and FAMILIES[impl] != "flashattn" and (
            impl in ("flash", "standard_cublas") or point.softcap):
        return dict(row, status="unsupported", note="No available kernel: no mask")
    if impl in ("flash", "cudnn") and point.head_dim > 256:
        return dict(row, status="unsupported", note="head_dim over 256")
    if impl == "flash" and point.head_dim_v != point.head_dim:
        return dict(row, status="unsupported", note="No available kernel: v's head_dim")
    if impl == "efficient" and point.heads_kv != point.heads:
        return dict(row, status="unsupported", note="No available kernel: no GQA")
    if isinstance(rate, tuple):
        rate = rate[1] if point.dtype == "f32" else rate[0]
    if rate is None:
        row.update(status="unsupported", note="only fp16 and bf16")
    elif impl == "cuda_naive" and point.flops() / (rate * 1e12) > 2:
        row.update(status="skipped", note="skipped: predicted over 2 s")
    elif impl in ("math", "standard_cublas") and point.seqlen >= 32768:
        row.update(status="oom", note="CUDA out of memory")
    else:
        row["peak_extra_bytes"] = (4 * point.batch * point.heads * point.seqlen  # lse
                                   if FAMILIES[impl] == "flashattn"
                                   else 4 * point.batch * point.heads * point.seqlen**2)
        row["rel_l2_err"] = 1e-6 if point.dtype == "f32" else 3e-3
        if point.timed:
            ms = point.flops() / (rate * 1e9)
            row.update(ms=ms, ms_min=0.98 * ms, ms_max=1.05 * ms, reps=10,
                       tflops=rate, floor_ms=ms / 10, fraction_of_ceiling=0.1)
    return row


def synthetic_results(suite, mode="full"):
    """Rows of the grids of Points (the scripts' grids have rows of their own: decode_row,
    varlen_row)."""
    rows = [synthetic_row(p, impl) for name, pts in suite.items() if name not in grid.SCRIPT_GRIDS
            for p in pts for impl in RATES if takes_part(p, impl)]
    return {"device": "NVIDIA H100 80GB HBM3", "commit": "abc1234", "date": "2026-11-22",
            "mode": mode, "environment": {"torch": "2.11.0"}, "impls": FAMILIES,
            "ceilings": {"bf16_matmul_tflops": 740.0, "f32_matmul_tflops": 51.0,
                         "copy_tb_per_s": 3.0, "l2_bytes": 50 << 20},
            "rows": rows}


def test_paper_grid_keeps_tokens_and_model_dim_fixed():
    points = grid.paper_points()
    assert len(points) == 6 * 3 * 2 * 2
    assert all(p.batch * p.seqlen == 16384 and p.heads * p.head_dim == 2048 for p in points)


def test_exercise_shapes_split_d_model_over_heads():
    points = grid.exercise_points()
    assert len(points) == 16
    assert {(p.seqlen, p.heads, p.head_dim) for p in points} >= {(1000, 1024, 1), (1, 1, 2),
                                                                  (17, 3, 32), (1000, 1, 1024)}
    assert all(p.dtype == "f32" and p.batch == 1 for p in points)


def test_flops_halve_for_causal():
    full = grid.Point("paper", "bf16", 2, 8192, 16, 128)
    causal = grid.Point("paper", "bf16", 2, 8192, 16, 128, "top_left")
    assert full.flops() == 4 * 2 * 16 * 8192**2 * 128 == 2 * causal.flops()
    assert full.min_bytes() == 4 * 2 * 8192 * 16 * 128 * 2


def test_memory_grid_doubles_to_65536_untimed():
    points = grid.memory_points()
    assert [p.seqlen for p in points] == [512 * 2**i for i in range(8)]
    assert not any(p.timed for p in points)


def test_report_ratio_is_best_alternative_time_over_ours():
    results = synthetic_results(grid.quick_suite(), mode="quick")
    md = report.markdown(results, "x.json")
    # cudnn (550) is the best alternative in bf16: cuda_tiled at 12 is 12/550 of it.
    assert f"{report.sig(12 / 550, 2)}×" in md
    # fp32: flash and cudnn decline, efficient (150) is best.
    assert f"{report.sig(12 / 150, 2)}×" in md
    assert "n/a" in md and "OOM" in md
    head = report.headline(results)
    assert "cuda_tiled paper bf16" in head and "cudnn" in head and "per point" in head


def test_rounds_merge_to_the_median_round_and_the_headline_predicts_from_them():
    points = grid.quick_suite()["paper"][:2]
    rows = []
    for scale in (1.0, 1.2, 0.9):  # three rounds; ours moves, the alternative does not
        for point in points:
            ours, alt = synthetic_row(point, "cuda_tiled"), synthetic_row(point, "cudnn")
            ours["ms"] *= scale
            rows += [ours, alt]
    merged = report.merge_rounds(rows)
    assert len(merged) == 2 * len(points)
    ours = [r for r in merged if r["impl"] == "cuda_tiled"]
    assert all(len(r["round_ms"]) == 3 for r in ours)
    assert all(r["ms"] == sorted(r["round_ms"])[1] for r in ours)
    results = synthetic_results({}, mode="quick")
    results["rows"], results["settings"] = merged, {"rounds": 3}
    head = report.headline(results)
    lo, hi = report.round_range([[(a, o * scale) for scale in (1.0, 1.2, 0.9)]
                                 for a, o in [(1.0, 1.0)]])
    assert lo < 1 / 1.2 and hi > 1 / 0.9  # wider than the rounds seen: a prediction
    base = 12 / 550  # cuda_tiled against cudnn in one round at scale 1
    assert f"rounds {report.sig(base * lo, 3)}-{report.sig(base * hi, 3)}" in head


def test_report_cli_writes_markdown_and_plots(tmp_path, monkeypatch):
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is not installed")
    path = tmp_path / "gpu-2026-11-22.json"
    path.write_text(json.dumps(synthetic_results(grid.full_suite())))
    monkeypatch.setattr(sys, "argv", ["report.py", str(path)])
    report.main()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["gpu-2026-11-22-exercise.png", "gpu-2026-11-22-exercise_bwd-bwd.png",
                     "gpu-2026-11-22-exercise_bwd-fwdbwd.png", "gpu-2026-11-22-memory.png",
                     "gpu-2026-11-22-paper-bf16.png", "gpu-2026-11-22-paper-f16.png",
                     "gpu-2026-11-22-paper_bwd-bwd-bf16.png",
                     "gpu-2026-11-22-paper_bwd-bwd-f16.png",
                     "gpu-2026-11-22-paper_bwd-fwdbwd-bf16.png",
                     "gpu-2026-11-22-paper_bwd-fwdbwd-f16.png",
                     "gpu-2026-11-22-wide_bwd-bwd-bf16.png",
                     "gpu-2026-11-22-wide_bwd-fwdbwd-bf16.png",
                     "gpu-2026-11-22.json", "gpu-2026-11-22.md"]
    md = (tmp_path / "gpu-2026-11-22.md").read_text()
    assert "![TFLOP/s against seqlen, bf16](gpu-2026-11-22-paper-bf16.png)" in md
    assert "(gpu-2026-11-22-paper_bwd-fwdbwd-f16.png)" in md
    assert "(gpu-2026-11-22-wide_bwd-bwd-bf16.png)" in md


def test_budget_gives_slow_calls_fewer_reps():
    timing = pytest.importorskip("timing")  # imports torch
    budget = timing.Budget(ms=100, min_reps=5, max_reps=50, slow_cap_ms=1000)
    assert budget.reps(0.01) == 50
    assert budget.reps(10) == 10
    assert budget.reps(100) == 5
    assert budget.reps(400) == 2
    assert budget.reps(1500) == 1
    assert timing.copies_needed(200 << 20, l2=50 << 20) == 1
    assert timing.copies_needed(12 << 20, l2=50 << 20) == timing.MAX_COPIES  # 17 wanted


def test_timed_calls_are_shared_among_interleaved_rounds():
    measure = pytest.importorskip("measure")  # imports torch
    import timing
    budget = timing.Budget(ms=100, min_reps=5, max_reps=50, slow_cap_ms=1000)
    rounds, share = measure.round_budget(budget, 0.01)
    assert rounds == measure.TIMING_ROUNDS
    assert share.reps(0.01) * rounds == budget.reps(0.01)
    assert measure.round_budget(budget, 50) == (1, budget)  # 5 calls: too few to share
    orders = measure.round_orders(["a", "b", "c", "d"], 8, "point")
    assert orders == measure.round_orders(["a", "b", "c", "d"], 8, "point")
    assert all(sorted(order) == ["a", "b", "c", "d"] for order in orders)
    assert len({tuple(order) for order in orders}) > 1


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads_q,heads_kv", [(3, 3), (4, 2)])
@pytest.mark.parametrize("head_dim_v", [16, 8])  # v's head_dim q's, or its own (as MLA's)
def test_standard_attention_and_math_sdpa_match_the_reference_rows(causal, heads_q, heads_kv,
                                                                    head_dim_v):
    torch = pytest.importorskip("torch")
    implementations = pytest.importorskip("implementations")  # imports flashattn too
    import accuracy
    q = torch.randn(2, 50, heads_q, 16)
    k, v = torch.randn(2, 50, heads_kv, 16), torch.randn(2, 50, heads_kv, head_dim_v)
    rows = accuracy.sample_rows(50, "cpu", count=8)
    reference = accuracy.reference_rows(q, k, v, causal, rows)
    for impl in implementations.all_impls():
        if impl.name in ("standard_cublas", "math"):
            with impl.context():
                out = impl.call(q, k, v, causal)
            assert out.shape == (2, heads_q, 50, head_dim_v)
            assert accuracy.rel_l2_err(out, reference, rows) < 1e-5
    zeros = torch.zeros(1, heads_q, 50, head_dim_v)
    assert math.isclose(accuracy.rel_l2_err(zeros, reference, rows), 1.0)


def test_builds_parse_as_name_path_pairs():
    implementations = pytest.importorskip("implementations")  # imports torch
    assert implementations.parse_builds("base=/a/lib.so,new=b.so") == {"base": "/a/lib.so",
                                                                       "new": "b.so"}
    assert implementations.parse_builds(None) == {}
    for bad in ("base", "=x.so", "a@b=x.so", "base="):
        with pytest.raises(SystemExit, match="NAME=PATH"):
            implementations.parse_builds(bad)


def test_another_build_runs_beside_this_one_among_the_alternatives():
    torch = pytest.importorskip("torch")
    implementations = pytest.importorskip("implementations")
    import accuracy
    from flashattn import _library
    impl = implementations.build_impl("cpu", "same", _library.library_path())
    assert (impl.name, impl.family) == ("cpu@same", implementations.ALTERNATIVE)
    q, k, v = (torch.randn(1, 40, 2, 8) for _ in range(3))
    rows = accuracy.sample_rows(40, "cpu", count=8)
    out = impl.call(q, k, v, True)
    assert out.shape == (1, 2, 40, 8)
    assert accuracy.rel_l2_err(out, accuracy.reference_rows(q, k, v, True, rows), rows) < 1e-5


def test_a_run_of_matching_points_says_so_in_its_report_and_history_line():
    results = synthetic_results(grid.full_suite())
    assert "full run;" in report.preamble(results)
    assert "match" not in report.history_line(results, "gpu.json")
    results["match"] = "d128 B8 L8k"
    assert "full run of the points matching `d128 B8 L8k` (--match);" in report.preamble(results)
    assert report.history_line(results, "gpu.json")["match"] == "d128 B8 L8k"


def test_history_line_carries_the_run_and_its_headline_ratios(tmp_path):
    results = synthetic_results(grid.full_suite())
    line = report.history_line(results, "gpu-2026-11-22.json")
    assert (line["kind"], line["commit"], line["mode"], line["rounds"]) == (
        "bench/run", "abc1234", "full", 1)
    assert line["grids"] == {"exercise": 16, "memory": 8, "paper": 72, "exercise_bwd": 12,
                             "wide": 24, "paper_bwd": 144, "wide_bwd": 48, "variants": 44,
                             "models": 49, "models_bwd": 11}
    assert line["timing"] == "fixed order"
    # cuda_tiled at 12 TFLOP/s against flash at 300 at every paper point: 0.04 everywhere.
    assert line["ratios"]["cuda_tiled/flash paper"] == [0.04, 0.04, 0.04, 72, 0]
    assert line["ratios"]["cuda_tiled/cudnn paper N>=1024"][3] == 60
    # fp32: flash and cudnn decline; the best alternative is efficient (150) where it runs.
    geo, lo, hi, points, at_least_1 = line["ratios"]["flashattn/best exercise"]
    assert points == 16 and lo <= geo <= hi
    path = tmp_path / "history.jsonl"
    report.append_history(results, "a.json", path)
    report.append_history(results, "b.json", path)
    assert [x["file"] for x in report.read_history(path)] == ["a.json", "b.json"]


def test_a_second_run_into_one_folder_keeps_the_first_ones_files(tmp_path):
    assert report.free_stem(tmp_path, "cpu-x-2026-11-30-abc") == "cpu-x-2026-11-30-abc"
    (tmp_path / "cpu-x-2026-11-30-abc.json").write_text("{}")
    assert report.free_stem(tmp_path, "cpu-x-2026-11-30-abc") == "cpu-x-2026-11-30-abc-2"
    (tmp_path / "cpu-x-2026-11-30-abc-2.json").write_text("{}")
    assert report.free_stem(tmp_path, "cpu-x-2026-11-30-abc") == "cpu-x-2026-11-30-abc-3"


def test_history_line_of_a_cpu_grid_run_has_its_ratios_per_pass():
    results = {"cpu": "Some CPU", "commit": "c0ffee0", "isa": "avx512", "threads": 16,
               "date": "2026-11-25T12:00:00+00:00",
               "ceilings": {"vector_peak_gflops": 1345.0, "copy_gb_per_s": 78.5},
               "rows": [dict(pass_="fwd", ratio=2.0), dict(pass_="fwd", ratio=0.5),
                        dict(pass_="bwd", ratio=1.5), dict(pass_="bwd", ratio=None)]}
    line = report.history_line(results, "cpu-some-cpu-2026-11-25-c0ffee0.json")
    assert (line["kind"], line["device"], line["isa"], line["threads"]) == (
        "cpu grid", "Some CPU", "avx512", 16)
    assert line["grids"] == {"cpu": 4}
    assert line["ratios"] == {"cpu/torch best fwd": [1.0, 0.5, 2.0, 2, 1],
                              "cpu/torch best bwd": [1.5, 1.5, 1.5, 1, 1]}


def test_history_line_of_a_cpu_ab_run_has_the_speedup_over_each_build():
    results = {"cpu": "Some CPU", "commit": "c0ffee0", "isa": "avx2",
               "date": "2026-11-28T12:00:00+00:00",
               "builds": {"base": "old/libflashattn.so"},
               "rows": [dict(pass_="fwd", ratio=1.2, ms=2.0, builds_ms={"base": 4.0}),
                        dict(pass_="fwd", ratio=1.1, ms=2.0, builds_ms={"base": 1.0}),
                        dict(pass_="bwd", ratio=None, ms=5.0, builds_ms={"base": 5.0})]}
    ratios = report.history_line(results)["ratios"]
    assert ratios["cpu/base fwd"] == [1.0, 0.5, 2.0, 2, 1]
    assert ratios["cpu/base bwd"] == [1.0, 1.0, 1.0, 1, 1]


def test_history_series_keeps_whole_grid_runs_and_cli_lines_parse():
    full = report.history_line(synthetic_results(grid.full_suite()), "h-abc1234.json")
    quick = report.history_line(synthetic_results(grid.quick_suite(), mode="quick"),
                                "h-abc1234-quick.json")
    cli = report.history_line({"device": "cpu", "commit": "c0ffee0",
                               "date": "2026-11-22T06:27:59Z",
                               "rows": [{"impl": "cpu", "dtype": "f32", "batch": 1,
                                         "seqlen_q": 8, "speedup_vs_standard": 0.5}]})
    assert (cli["kind"], cli["date"]) == ("flashattn bench", "2026-11-22T06:27:59+00:00")
    assert cli["ratios"] == {"cpu/standard cli": [0.5, 0.5, 0.5, 1, 0]}
    drawn, series = report.history_series([cli, quick, full], ("cuda_tiled/flash paper",))
    assert drawn == [full]  # the quick run covers a few paper points only
    assert series["cuda_tiled/flash paper"] == [
        (0, full["ratios"]["cuda_tiled/flash paper"], False)]
    assert report.run_label(quick) == "abc1234-quick"
    assert "abc1234" in report.history_text(drawn, series)


def test_plots_do_not_import_report():
    source = (Path(__file__).resolve().parent / "plots.py").read_text()
    assert "import report" not in source


def test_history_cli_prints_and_plots(tmp_path, monkeypatch, capsys):
    path = tmp_path / "history.jsonl"
    for commit in ("abc1234", "def5678"):
        results = dict(synthetic_results(grid.full_suite()), commit=commit)
        report.append_history(results, f"gpu-{commit}.json", path)
    monkeypatch.setattr(sys, "argv", ["report.py", "--history", str(path)])
    report.main()  # without matplotlib: the table and a note, no failure
    out = capsys.readouterr().out
    assert "def5678" in out and "cuda_wgmma/cudnn paper N>=1024" in out
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "history.png").stat().st_size > 0


def test_backward_grids_time_each_shape_alone_and_with_the_forward():
    points = grid.paper_bwd_points()
    assert len(points) == 2 * len(grid.paper_points())
    assert {p.pass_ for p in points} == {"bwd", "fwd+bwd"}
    forward = grid.Point("paper", "bf16", 4, 4096, 16, 128, "top_left")
    backward = grid.Point("paper_bwd", "bf16", 4, 4096, 16, 128, "top_left", pass_="bwd")
    both = grid.Point("paper_bwd", "bf16", 4, 4096, 16, 128, "top_left", pass_="fwd+bwd")
    assert backward.flops() == 2.5 * forward.flops() and both.flops() == 3.5 * forward.flops()
    assert backward.min_bytes() == 2 * forward.min_bytes()
    assert backward.label() == forward.label() + " bwd"
    shapes = {p.exercise for p in grid.exercise_bwd_points()}
    assert shapes == {(1000, 1024, 16), (4096, 1024, 16), (1000, 512, 8)}


def test_dry_run_lists_the_backward_points():
    import subprocess
    run = Path(__file__).resolve().parent / "run"
    listed = subprocess.run([sys.executable, str(run), "--dry-run", "--grids",
                             "paper_bwd,exercise_bwd,wide_bwd"], capture_output=True,
                            text=True, check=True).stdout
    assert "paper_bwd: 144 points" in listed and "exercise_bwd: 12 points" in listed
    assert "wide_bwd: 48 points" in listed and "B2 N8192 H8/4 d384 bf16 fwd+bwd" in listed
    assert "B1 N16384 H8 d256 f16 causal fwd+bwd" in listed
    assert "N=4096 d_model=1024 h=16 (d64) f32 bwd" in listed


def test_backward_rows_report_per_pass_and_keep_passes_apart():
    results = synthetic_results(grid.full_suite())
    md = report.markdown(results, "x.json")
    assert "## Backward, FlashAttention-paper grid, bf16: backward alone (TFLOP/s)" in md
    assert "## Backward, exercise shapes, fp32: forward + backward (ms)" in md
    head = report.headline(results)
    assert "auto paper bwd bf16" in head and "cuda_tiled exercise fwd+bwd f32" in head
    line = report.history_line(results, "x.json")
    # auto at 200 TFLOP/s against flash at 300: 1.5x slower, at every backward paper point.
    assert line["ratios"]["auto/flash paper bwd"] == [0.6667, 0.6667, 0.6667, 72, 0]
    assert line["ratios"]["auto/flash paper fwd+bwd N>=1024"][3] == 60
    assert "cuda_naive/flash paper bwd" not in line["ratios"]
    rows = [synthetic_row(p, "auto") for p in grid.paper_bwd_points()[:2]]
    assert len(report.merge_rounds(rows + rows)) == 2  # bwd and fwd+bwd: two points


def test_slow_backwards_are_predicted_per_implementation_and_pass():
    measure = pytest.importorskip("measure")  # imports torch
    implementations = pytest.importorskip("implementations")
    tiled = implementations.Impl("cuda_tiled", "flashattn", None, gradients=object(),
                                 slow_backward_tflops=1.0)
    naive = implementations.Impl("cuda_naive", "flashattn", None, slow=True)
    fast = implementations.Impl("cuda_mma", "flashattn", None, gradients=object())
    small = grid.Point("paper_bwd", "bf16", 32, 512, 32, 64, pass_="bwd")
    large = grid.Point("paper_bwd", "bf16", 1, 16384, 32, 64, pass_="bwd")
    rate = measure.SlowRate(2.0)
    assert not rate.too_slow(small, tiled) and rate.too_slow(large, tiled)
    assert not rate.too_slow(large, fast) and not naive.runs("bwd")
    assert rate.too_slow(grid.Point("paper", "bf16", 1, 16384, 32, 64), naive)
    rate.observe(small, tiled, small.flops() / (5.0 * 1e9))  # 5 TFLOP/s seen
    assert rate.rate(large, tiled) == 1.0  # slowest seen stays the prior's 1
    rate.observe(small, tiled, small.flops() / (0.5 * 1e9))
    assert rate.rate(large, tiled) == pytest.approx(0.5)
    assert rate.rate(grid.Point("paper_bwd", "bf16", 1, 16384, 32, 64, pass_="fwd+bwd"),
                     tiled) == 1.0  # another pass: its own rate


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads_q,heads_kv", [(3, 3), (4, 2)])
@pytest.mark.parametrize("head_dim_v", [16, 8])
def test_every_backward_gives_the_reference_gradients(causal, heads_q, heads_kv, head_dim_v):
    torch = pytest.importorskip("torch")
    implementations = pytest.importorskip("implementations")
    import accuracy
    shapes = [(2, 40, h, d) for h, d in ((heads_q, 16), (heads_kv, 16), (heads_kv, head_dim_v),
                                         (heads_q, head_dim_v))]  # q, k, v, dout
    inputs = [tuple(torch.randn(shape) for shape in shapes) for _ in range(2)]
    rows = accuracy.sample_rows(40, "cpu", count=8)
    reference = accuracy.reference_gradients(*inputs[1], causal, rows)
    impls = [implementations.flashattn_impl(implementations.AUTO),
             implementations.flashattn_impl("cpu"),
             implementations.sdpa_impl("math", implementations.SDPA_BACKENDS["math"]),
             implementations.Impl("standard_cublas", "alternative",
                                  implementations.standard_attention,
                                  gradients=implementations.autograd_gradients(
                                      implementations.standard_attention))]
    for impl in impls:
        for pass_ in ("bwd", "fwd+bwd"):
            with impl.context():
                call = impl.gradients(pass_, inputs, causal)
                grads = call(1)
                again = call(1)  # a kept graph runs twice
            assert [g.shape for g in grads] == shapes[:3], impl.name
            assert accuracy.gradients_err(grads, reference, rows) < 1e-5, (impl.name, pass_)
            assert all(torch.equal(a, b) for a, b in zip(grads, again)), impl.name


def test_wide_bwd_grid_has_grouped_query_points_and_leaves_the_others_alone():
    points = grid.wide_bwd_points()
    assert len(points) == 48 and grid.full_suite()["wide_bwd"] == points
    assert len(grid.quick_suite()["wide_bwd"]) == 1
    assert {(p.heads, p.heads_kv) for p in points} == {(8, 8), (8, 4)}
    assert {p.head_dim for p in points} == {320, 384, 512}
    assert {(p.batch, p.seqlen) for p in points} == {(4, 4096), (2, 8192)}
    assert {(p.dtype, p.causal, p.pass_) for p in points} == {
        ("bf16", mask, pass_) for mask in ("none", "top_left") for pass_ in ("bwd", "fwd+bwd")}
    labels = {p.label() for p in points}
    assert "B4 N4096 H8/4 d512 bf16 causal bwd" in labels
    assert "B2 N8192 H8 d320 bf16 fwd+bwd" in labels
    plain = grid.Point("paper", "bf16", 4, 4096, 16, 128, "top_left")
    assert plain.heads_kv == 16 and plain == grid.Point("paper", "bf16", 4, 4096, 16, 128,
                                                        "top_left", heads_kv=16)
    assert plain.label() == "B4 N4096 H16 d128 bf16 causal"


def test_grouped_query_flops_count_query_heads_and_bytes_count_kv_heads():
    gqa = grid.Point("wide_bwd", "bf16", 4, 4096, 8, 512, "top_left", pass_="bwd", heads_kv=4)
    mha = grid.Point("wide_bwd", "bf16", 4, 4096, 8, 512, "top_left", pass_="bwd")
    assert gqa.flops() == mha.flops() == 2.5 * 4 * 4 * 8 * 4096**2 * 512 / 2
    q_bytes = 4 * 4096 * 8 * 512 * 2
    assert gqa.tensor_bytes(gqa.heads, 512) == q_bytes
    assert gqa.tensor_bytes(gqa.heads_kv, 512) == q_bytes // 2
    assert mha.min_bytes() == 8 * q_bytes
    assert gqa.min_bytes() == 4 * q_bytes + 4 * q_bytes // 2  # q, out, dout, dq; k, v, dk, dv
    both = grid.Point("wide_bwd", "bf16", 4, 4096, 8, 512, pass_="fwd+bwd", heads_kv=4)
    assert both.min_bytes() == 6 * q_bytes + 6 * q_bytes // 2
    forward = grid.Point("wide_bwd", "bf16", 4, 4096, 8, 512, heads_kv=4)
    assert forward.min_bytes() == 2 * q_bytes + 2 * q_bytes // 2


def test_report_writes_the_wide_grid_per_pass_against_each_alternative_and_the_best():
    results = synthetic_results({"wide_bwd": grid.wide_bwd_points()})
    md = report.markdown(results, "x.json")
    for pass_ in ("backward alone", "forward + backward"):
        assert f"## Backward at wide head dims, bf16: {pass_} (TFLOP/s)" in md
    # efficient (150) is best where it runs; at the grouped points standard_cublas (60).
    assert "| 512 | causal | 4096 | 4×8 | 200 |" in md
    row = "| 512 | causal | 4096 | 4×8/4 | 200 | 12.0 | n/a | 20.0 | 60.0 | standard_cublas |"
    assert row in md
    assert "`efficient` unsupported at 24 point(s) (wide_bwd): No available kernel" in md
    head = report.headline(results)
    assert head.splitlines()[1].split()[-1] == "best"
    gqa_line = next(x for x in head.splitlines() if x.startswith("auto wide bwd GQA bf16"))
    assert gqa_line.split()[-2:] == ["3.3×", "(3.3-3.3)"]  # best: standard_cublas, 60 / 200
    line = report.history_line(results, "x.json")
    assert line["grids"] == {"wide_bwd": 48}
    ratios = line["ratios"]
    assert ratios["auto/best wide bwd"] == [report.four(math.sqrt(200 / 150 * 200 / 60)),
                                            1.333, 3.333, 24, 24]
    assert ratios["auto/best wide fwd+bwd GQA"] == [3.333, 3.333, 3.333, 12, 12]
    assert ratios["auto/math wide bwd GQA"][3] == 12 and ratios["auto/math wide bwd"][3] == 24
    assert ratios["auto/efficient wide bwd"][3] == 12
    assert "auto/efficient wide bwd GQA" not in ratios
    plain, grouped = grid.wide_bwd_points()[0:9:8]  # one shape, 8 kv heads and 4
    assert plain.label().replace("H8", "H8/4") == grouped.label()
    rows = [synthetic_row(p, "auto") for p in (plain, grouped)]
    assert len(report.merge_rounds(rows)) == 2  # two points, not two rounds of one


def test_grouped_reference_is_the_reference_on_kv_heads_repeated_over_each_group():
    torch = pytest.importorskip("torch")
    import accuracy
    q, dout = (torch.randn(2, 40, 4, 16) for _ in range(2))
    k, v = (torch.randn(2, 40, 2, 16) for _ in range(2))
    repeated_k, repeated_v = (t.repeat_interleave(2, dim=2) for t in (k, v))
    rows = accuracy.sample_rows(40, "cpu", count=8)
    assert torch.allclose(accuracy.reference_rows(q, k, v, True, rows),
                          accuracy.reference_rows(q, repeated_k, repeated_v, True, rows))
    dq, dk, dv = accuracy.reference_gradients(q, k, v, dout, True, rows)
    dq_rep, dk_rep, dv_rep = accuracy.reference_gradients(q, repeated_k, repeated_v, dout,
                                                          True, rows)
    assert dk.shape == dv.shape == (2, len(rows), 16)
    assert torch.allclose(dq, dq_rep)
    # A kv head's gradient is the sum over the query heads that share it.
    assert torch.allclose(dk, dk_rep.view(2, 2, len(rows), 16).sum(1))
    assert torch.allclose(dv, dv_rep.view(2, 2, len(rows), 16).sum(1))


def test_variants_grid_sets_each_variant_beside_its_plain_shape():
    points = grid.variants_points()
    assert len(points) == 44 and grid.full_suite()["variants"] == points
    assert {(p.dtype, p.head_dim, p.heads) for p in points} == {("bf16", 128, 16)}
    assert {p.pass_ for p in points} == {"fwd", "bwd"}
    labels = {p.label() for p in points}
    assert "B1 N16384 H16 d128 bf16 causal window(4096,0) bwd" in labels
    assert "B4 N4096 H16 d128 bf16 softcap 30" in labels
    assert "B1 N16384 H16 d128 bf16 causal alibi bwd" in labels
    assert "B4 N4096 H16 d128 bf16 dropout 0.1" in labels
    shapes = {}
    for p in points:
        if p.window is None:
            shapes.setdefault((p.pass_, p.batch, p.seqlen, p.causal), []).append(
                p.variant_label())
    beside_plain = {key: v for key, v in shapes.items() if len(v) > 1}
    assert len(beside_plain) == 2 * 2 * 2  # passes × seqlens × masks
    masks = {(4, 4096, "none"): ["bias (1,16,N,N) bf16", "key padding (B,1,1,N) bool"],
             (4, 4096, "top_left"): ["documents (1,1,N,N) bool"],
             (1, 16384, "none"): ["bias (1,1,N,N) bf16"], (1, 16384, "top_left"): []}
    for (pass_, *shape), variants in beside_plain.items():
        assert variants == ["", "softcap 30", "alibi", "dropout 0.1"] + masks[tuple(shape)]
    quick = grid.quick_suite()["variants"]
    assert [p.label() for p in quick][:2] == ["B1 N16384 H16 d128 bf16 causal window(4096,0)",
                                               "B1 N10880 H16 d128 bf16 causal"]
    assert quick[-1].label() == "B4 N4096 H16 d128 bf16 causal documents (1,1,N,N) bool"


def test_mask_points_count_the_mask_among_the_bytes_and_keep_it_in_their_rows():
    import result_rows
    by_label = {p.label(): p for p in grid.variants_points()}
    head_bias = by_label["B4 N4096 H16 d128 bf16 bias (1,16,N,N) bf16 bwd"]
    plain = dataclasses.replace(head_bias, attn_mask=None)
    assert head_bias.mask_bytes() == 16 * 4096 * 4096 * 2 and plain.mask_bytes() == 0
    assert head_bias.min_bytes() == plain.min_bytes() + head_bias.mask_bytes()
    assert head_bias.flops() == plain.flops()  # hidden pairs counted, as for a dense mask
    padding = by_label["B4 N4096 H16 d128 bf16 key padding (B,1,1,N) bool"]
    assert padding.mask_bytes() == 4 * 4096  # one byte per key of each sequence
    shared = by_label["B1 N16384 H16 d128 bf16 bias (1,1,N,N) bf16"]
    assert shared.mask_bytes() == 512 << 20
    documents = by_label["B4 N4096 H16 d128 bf16 causal documents (1,1,N,N) bool bwd"]
    for point in (head_bias, padding, shared, documents):
        assert result_rows.point_of(synthetic_row(point, "cuda_tiled")) == point


def test_window_flops_count_the_visible_pairs_and_the_dense_point_matches_them():
    assert grid.visible_pairs(5, True, 1, 0) == 1 + 2 + 2 + 2 + 2
    assert grid.visible_pairs(5, True, -1, -1) == 15  # causal alone: n(n+1)/2
    assert grid.visible_pairs(4, False, -1, -1) == 16
    assert grid.visible_pairs(6, False, 1, 2) == 3 + 4 + 4 + 4 + 3 + 2
    window, dense = grid.variants_points()[:2]
    pairs = 4096 * 4097 // 2 + (16384 - 4096) * 4097
    assert window.flops() == 4 * 128 * pairs * 16 * 1
    assert dense.window is None and dense.causal == "top_left" and dense.seqlen % 128 == 0
    assert abs(dense.flops() / window.flops() - 1) < 0.01
    assert window.variant_label() == "window(4096,0)" and dense.variant_label() == ""


def variants_results():
    return synthetic_results({"variants": grid.variants_points()})


def test_report_sets_each_variant_against_plain_and_the_window_against_equal_work():
    results = variants_results()
    md = report.markdown(results, "x.json")
    assert "## Variants: forward (ms)" in md and "## Variants: backward alone (ms)" in md
    assert "## Sliding window against the dense causal problem of the same work" in md
    # Our rates fall by VARIANT_COST with softcap or ALiBi: +3.0% over plain, each.
    softcap = next(line for line in md.splitlines() if line.startswith("| 4×4096 |  | softcap"))
    assert f"{100 * (VARIANT_COST - 1):+.1f}%" in softcap
    documents = next(line for line in md.splitlines()
                     if line.startswith("| 4×4096 | causal | documents (1,1,N,N) bool |"))
    assert f"{100 * (VARIANT_COST - 1):+.1f}%" in documents
    # The window at the same rate as its dense partner: TFLOP/s ratio 1.
    window = next(line for line in md.splitlines() if line.startswith("| fwd | cuda_tiled |"))
    assert window.endswith("| 1.00× |") and "1×10880" in window
    assert "`flash` unsupported" in md
    line = report.history_line(results, "x.json")
    assert line["grids"] == {"variants": 44}
    assert "cuda_tiled/efficient variants bwd" in line["ratios"]
    rows = [synthetic_row(p, "auto") for p in grid.variants_points()[2:5]]
    assert len(report.merge_rounds(rows)) == 3  # plain, softcap, alibi: three points


def test_dry_run_lists_the_variants_grid():
    import subprocess
    run = Path(__file__).resolve().parent / "run"
    listed = subprocess.run([sys.executable, str(run), "--dry-run", "--grids", "variants"],
                            capture_output=True, text=True, check=True).stdout
    assert "variants: 44 points" in listed
    assert "B1 N16384 H16 d128 bf16 causal window(4096,0) bwd" in listed
    assert "B4 N4096 H16 d128 bf16 key padding (B,1,1,N) bool bwd" in listed
    assert "B1 N16384 H16 d128 bf16 bias (1,1,N,N) bf16" in listed


def test_the_variants_rule_of_the_bench_is_flashattns():
    """score_variants (the SDPA masks and the float64 reference) against flashattn's own
    float64 reference backend, forward and gradients, on the CPU."""
    torch = pytest.importorskip("torch")
    import accuracy
    import flashattn
    import score_variants
    heads, seqlen = 4, 40
    rows = accuracy.sample_rows(seqlen, "cpu", count=8)
    for window, softcap, alibi in [((6, 0), 0.0, False), ((-1, -1), 3.0, False),
                                   ((-1, -1), 0.0, True), ((5, 3), 2.0, True)]:
        for causal in (False, True):
            variants = score_variants.Variants(
                window, softcap, score_variants.alibi_slopes(heads, "cpu") if alibi else None)
            q, k, v, dout = (torch.randn(2, seqlen, heads, 16) for _ in range(4))
            out, lse = flashattn.attention(q, k, v, causal=causal, return_lse=True,
                                           backend="reference", **variants.keywords())
            got = out.transpose(1, 2)
            assert accuracy.rel_l2_err(got, accuracy.reference_rows(q, k, v, causal, rows,
                                                                    variants), rows) < 1e-5
            grads = flashattn.attention_backward(q, k, v, out, dout, lse, causal=causal,
                                                 backend="reference", **variants.keywords())
            reference = accuracy.reference_gradients(q, k, v, dout, causal, rows, variants)
            assert accuracy.gradients_err(grads, reference, rows) < 1e-5
            if softcap == 0:
                mask = score_variants.sdpa_mask(seqlen, causal, variants, torch.float32, "cpu")
                theirs = torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
                assert accuracy.rel_l2_err(theirs, accuracy.reference_rows(
                    q, k, v, causal, rows, variants), rows) < 1e-5


def test_implementations_take_the_variants_or_decline_them():
    torch = pytest.importorskip("torch")
    implementations = pytest.importorskip("implementations")
    import accuracy
    import measure
    import score_variants
    point = grid.Point("variants", "f32", 2, 48, 4, 16, "top_left", window=(8, 0), alibi=True)
    variants = score_variants.of_point(point, "cpu")
    inputs = [tuple(torch.randn(2, 48, 4, 16) for _ in range(4))]
    rows = accuracy.sample_rows(48, "cpu", count=8)
    reference = accuracy.reference_rows(*inputs[0][:3], True, rows, variants)
    gradients = accuracy.reference_gradients(*inputs[0], True, rows, variants)
    impls = [implementations.flashattn_impl("cpu"), implementations.flashattn_impl(
        implementations.AUTO), implementations.sdpa_impl("math",
                                                         implementations.SDPA_BACKENDS["math"])]
    for impl in impls:
        with impl.context():
            if impl.forward:
                out = measure.operation(point, impl, [inputs[0][:3]], variants)(0)
                assert accuracy.rel_l2_err(out, reference, rows) < 1e-5, impl.name
            for pass_ in ("bwd", "fwd+bwd"):
                grads = impl.gradients(pass_, inputs, True, variants)(0)
                assert accuracy.gradients_err(grads, gradients, rows) < 1e-5, (impl.name, pass_)
    assert len(variants.sdpa_masks) == 1  # made once, kept for the point's calls
    math_sdpa = impls[2]
    softcap = score_variants.Variants(softcap=30.0)
    with pytest.raises(implementations.Declined, match="no softcap"):
        math_sdpa.call(*inputs[0][:3], True, softcap)
    with pytest.raises(implementations.Declined, match="no variants"):
        implementations.standard_attention(*inputs[0][:3], True, variants)
    huge = torch.empty(1, 16384, 16, 128, dtype=torch.bfloat16, device="meta")
    alibi = score_variants.Variants(alibi_slopes=torch.ones(16))
    with pytest.raises(implementations.Declined, match="8.0 GiB"):
        implementations.sdpa_mask(huge, True, alibi)
    status, note = measure.failure(implementations.Declined("no softcap"), [])
    assert (status, note) == ("unsupported", "no softcap")


def test_mask_tensors_are_drawn_as_the_grid_names_them():
    torch = pytest.importorskip("torch")
    import score_variants
    by_name = {p.attn_mask: p for p in grid.variants_points() if p.attn_mask and p.pass_ == "fwd"}
    bias = score_variants.attn_mask(dataclasses.replace(by_name["head_bias"], seqlen=64), "cpu")
    assert bias.shape == (1, 16, 64, 64) and bias.dtype == torch.bfloat16
    shared = score_variants.attn_mask(dataclasses.replace(by_name["shared_bias"], seqlen=64,
                                                          dtype="f32"), "cpu")
    assert shared.shape == (1, 1, 64, 64) and shared.dtype == torch.float32  # q's dtype
    padding_point = by_name["key_padding"]
    n = padding_point.seqlen
    padding = score_variants.attn_mask(padding_point, "cpu")
    assert padding.shape == (4, 1, n, n) and padding.dtype == torch.bool
    assert padding.stride() == (n, n, 0, 1)  # one stored row per sequence, no copy
    kept = padding[:, 0, 0].sum(-1)
    assert torch.equal(padding[:, 0, 0], torch.arange(n) < kept[:, None])  # a prefix each
    assert kept.min() >= 0.6 * n and len(set(kept.tolist())) > 1
    assert torch.equal(score_variants.attn_mask(padding_point, "cpu"), padding)  # seeded
    documents = score_variants.attn_mask(by_name["documents"], "cpu")
    assert documents.shape == (1, 1, n, n) and documents.dtype == torch.bool
    lengths, start = [], 0
    while start < n:
        lengths.append(int(documents[0, 0, start].sum()))
        start += lengths[-1]
    assert sum(lengths) == n and len(lengths) > 1
    assert all(256 <= length <= 2048 for length in lengths[:-1]) and lengths[-1] <= 2048
    block_diagonal = torch.block_diag(*(torch.ones(m, m) for m in lengths)).bool()
    assert torch.equal(documents[0, 0], block_diagonal)


@pytest.mark.parametrize("causal", [False, True])
def test_the_mask_tensor_rule_of_the_bench_is_flashattns(causal):
    """score_variants and the float64 reference with an attn_mask (bool, bias, broadcast key
    padding; rows with no key among them) against flashattn's reference backend, forward
    and gradients, and PyTorch's SDPA on the mask sdpa_mask folds the causal mask into."""
    torch = pytest.importorskip("torch")
    flashattn = pytest.importorskip("flashattn")
    import accuracy
    import score_variants
    from torch.nn.attention import SDPBackend, sdpa_kernel
    heads, seqlen = 4, 40
    rows = accuracy.sample_rows(seqlen, "cpu", count=8)
    q, k, v, dout = (torch.randn(2, seqlen, heads, 16) for _ in range(4))
    bool_mask = torch.rand(2, 1, seqlen, seqlen) < 0.7
    bool_mask[0, 0, rows[2]] = False  # a sampled row that sees no key
    bias = torch.randn(1, heads, seqlen, seqlen)
    bias[0, 1, rows[3]] = float("-inf")
    padding = (torch.arange(seqlen) < torch.tensor([30, 25])[:, None]).view(2, 1, 1, seqlen)
    for mask in (bool_mask, bias, padding.expand(2, 1, seqlen, seqlen)):
        variants = score_variants.Variants(attn_mask=mask)
        reference = accuracy.reference_rows(q, k, v, causal, rows, variants)
        out, lse = flashattn.attention(q, k, v, causal=causal, return_lse=True,
                                       backend="reference", **variants.keywords())
        assert accuracy.rel_l2_err(out.transpose(1, 2), reference, rows) < 1e-5
        grads = flashattn.attention_backward(q, k, v, out, dout, lse, causal=causal,
                                             backend="reference", **variants.keywords())
        gradients = accuracy.reference_gradients(q, k, v, dout, causal, rows, variants)
        assert accuracy.gradients_err(grads, gradients, rows) < 1e-5
        sdpa_mask = score_variants.sdpa_mask(seqlen, causal, variants, q.dtype, "cpu")
        assert (sdpa_mask is mask) == (not causal)  # the same tensor where nothing is folded
        with sdpa_kernel([SDPBackend.MATH]):
            theirs = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=sdpa_mask)
        assert accuracy.rel_l2_err(theirs, reference, rows) < 1e-5
    assert torch.count_nonzero(accuracy.reference_rows(
        q, k, v, causal, rows, score_variants.Variants(attn_mask=bool_mask))[:, 2]) == 0


def test_implementations_take_a_mask_tensor():
    torch = pytest.importorskip("torch")
    implementations = pytest.importorskip("implementations")
    import accuracy
    import measure
    import score_variants
    from flashattn import _library
    impls = [implementations.flashattn_impl("cpu"),
             implementations.flashattn_impl(implementations.AUTO),
             implementations.sdpa_impl("math", implementations.SDPA_BACKENDS["math"]),
             implementations.build_impl("cpu", "same", _library.library_path())]
    for causal, name in (("none", "key_padding"), ("top_left", "head_bias"),
                         ("top_left", "documents")):
        point = grid.Point("variants", "f32", 2, 48, 4, 16, causal, attn_mask=name)
        variants = score_variants.of_point(point, "cpu")
        is_causal = causal != "none"
        inputs = [tuple(torch.randn(2, 48, 4, 16) for _ in range(4))]
        rows = accuracy.sample_rows(48, "cpu", count=8)
        reference = accuracy.reference_rows(*inputs[0][:3], is_causal, rows, variants)
        gradients = accuracy.reference_gradients(*inputs[0], is_causal, rows, variants)
        for impl in impls:
            with impl.context():
                out = measure.operation(point, impl, [inputs[0][:3]], variants)(0)
                assert accuracy.rel_l2_err(out, reference, rows) < 1e-5, (impl.name, name)
                for pass_ in ("bwd", "fwd+bwd") if impl.gradients else ():
                    grads = impl.gradients(pass_, inputs, is_causal, variants)(0)
                    assert accuracy.gradients_err(grads, gradients, rows) < 1e-5, (
                        impl.name, name, pass_)
        sdpa_masks = list(variants.sdpa_masks.values())
        assert len(sdpa_masks) == 1  # made once, kept for the point's calls
        assert (sdpa_masks[0] is variants.attn_mask) == (not is_causal)
    math_sdpa = impls[2]
    alibi = score_variants.Variants(alibi_slopes=torch.ones(4), attn_mask=variants.attn_mask)
    with pytest.raises(implementations.Declined, match="ALiBi"):
        math_sdpa.call(*inputs[0][:3], True, alibi)
    with pytest.raises(implementations.Declined, match="no variants"):
        implementations.standard_attention(*inputs[0][:3], True, variants)


def test_cpu_grid_sets_the_variants_beside_plain_points_of_their_shape():
    cpu_suite = pytest.importorskip("cpu_suite")  # imports torch
    points = cpu_suite.points()
    labels = [cpu_suite.label(p) for p in points]
    variants = [p for p in points if p.get("window") or p.get("softcap") or p.get("alibi")]
    assert len(variants) == 2 * len(cpu_suite.VARIANTS)
    assert "bwd B1 Nq4096 Nk4096 H8 d64 causal window(512,0)" in labels
    assert "fwd B4 Nq1024 Nk1024 H8 d64 softcap 30" in labels
    for p in variants:
        plain = {key: value for key, value in p.items()
                 if key not in ("window", "softcap", "alibi")}
        assert plain in points, cpu_suite.label(p)
    window = next(p for p in variants if p.get("window") and p["pass_"] == "bwd")
    assert cpu_suite.flops(window) == 2.5 * 4 * 8 * 64 * grid.visible_pairs(4096, True, 512, 0)


def test_cpu_grid_times_pytorch_in_turn_with_ours_and_drops_its_clear_losers(monkeypatch):
    cpu_suite = pytest.importorskip("cpu_suite")  # imports torch
    # Each call's time per turn; the second turn is the machine's slow phase for "ours".
    turns = {"@this": [2.0, 3.0, 1.0], "torch:flash": [2.5, 1.5, 2.5], "torch:math": [9.0]}
    order = []

    def timed(fn):
        order.append(fn)
        return turns[fn].pop(0)
    monkeypatch.setattr(cpu_suite, "timed", timed)
    best = cpu_suite.interleaved({name: name for name in turns}, rounds=3)
    assert best == {"@this": 1.0, "torch:flash": 1.5, "torch:math": 9.0}
    # math (over 1.5x flash after the first turn) is timed once; the others every turn.
    assert order == ["@this", "torch:flash", "torch:math"] + ["@this", "torch:flash"] * 2


def test_cpu_grid_dry_run_lists_points_without_timing(capsys):
    cpu_suite = pytest.importorskip("cpu_suite")  # imports torch
    cpu_suite.dry_run(match="^bwd B8 ")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "cpu: 4 points"
    assert all(line.split()[0] == "bwd" for line in out[1:]) and len(out) == 5


def test_models_grid_names_real_layers_at_their_shapes():
    import model_shapes
    points = grid.models_points()
    assert 35 <= len(points) <= 50 and grid.full_suite()["models"] == points
    names = [p.name for p in points]
    assert len(set(names)) == len(names) and all(names)
    assert len({p.label() for p in points}) == len(points)
    for p in points:
        assert p.label().startswith(f"{p.name}: ") and p.pass_ == "fwd"
        assert min(p.batch, p.seqlen, p.heads, p.heads_kv, p.head_dim) >= 1, p.name
        assert p.heads % p.heads_kv == 0, p.name  # each kv head serves a whole group
        assert p.dtype in ("bf16", "f16") and p.causal in grid.MASKS, p.name
    ragged = [p for p in points if p.seqlen % grid.BLOCK]  # a partial last key block
    assert len(ragged) >= len(points) // 3
    assert sum(p.causal != "none" for p in ragged) >= 5  # prompts of any length
    assert {p.heads // p.heads_kv for p in points} >= {1, 4, 6, 7, 8, 71}
    assert {p.head_dim for p in points} >= {40, 64, 72, 80, 96, 128, 160, 256}
    assert {p.seqlen for p in points} >= {512, 577, 729, 1024, 1500, 4608, 32768}
    assert {p.causal for p in points} == {"none", "top_left"}
    assert sum(p.seqlen >= 65536 for p in points) <= 2
    shapes = {p.name: (p.dtype, p.batch, p.seqlen, p.heads, p.heads_kv, p.head_dim, p.causal)
              for p in points}
    assert [shapes[name] for name in model_shapes.REPORTED_SLOW] == [
        ("f16", 64, 256, 16, 16, 64, "top_left"), ("bf16", 1, 4608, 24, 24, 128, "none"),
        ("bf16", 4, 3000, 28, 4, 128, "top_left")]
    quick = grid.quick_suite()["models"]
    assert {p.name for p in quick} == set(model_shapes.QUICK_FORWARD)
    assert all(p in points for p in quick)


def test_models_bwd_grid_times_a_training_step_of_a_few_layers():
    points = grid.models_bwd_points()
    assert len(points) == 11 and grid.full_suite()["models_bwd"] == points
    assert {p.pass_ for p in points} == {"fwd+bwd"} and {p.grid for p in points} == {"models_bwd"}
    assert len({p.name for p in points}) == 11
    assert all(p.heads % p.heads_kv == 0 for p in points)
    assert {(p.head_dim, p.head_dim_v) for p in points} == {(64, 64), (72, 72), (128, 128),
                                                            (256, 256), (192, 128)}
    llama = points[0]
    assert llama.label() == "Llama-3-8B training 8192: B1 N8192 H32/8 d128 bf16 causal fwd+bwd"
    assert llama.flops() == 3.5 * 4 * 32 * 8192**2 * 128 / 2
    assert [p.name for p in grid.quick_suite()["models_bwd"]] == ["Llama-3-8B training 8192"]


def dry_run(*args):
    """bench/run --dry-run's listing with these arguments."""
    import subprocess
    run = Path(__file__).resolve().parent / "run"
    return subprocess.run([sys.executable, str(run), "--dry-run", *args], capture_output=True,
                          text=True, check=True).stdout


def test_head_dims_replace_the_paper_grids_head_dims():
    listed = dry_run("--grids", "paper,paper_bwd", "--head-dims", "96,192", "--match", "bf16")
    assert "paper: 24 points" in listed and "paper_bwd: 48 points" in listed
    assert "B16 N1024 H21 d96 bf16 causal bwd " in listed
    assert "B1 N16384 H10 d192 bf16 fwd+bwd " in listed
    assert " d64 " not in listed and " d256 " not in listed


def test_wide_head_dims_replace_the_wide_grids_head_dims():
    listed = dry_run("--grids", "wide,wide_bwd", "--wide-head-dims", "264,448")
    assert "wide: 16 points" in listed and "wide_bwd: 32 points" in listed
    assert "B2 N8192 H8/4 d264 bf16 causal " in listed and " d448 bf16 fwd+bwd" in listed
    assert " d384 " not in listed and " d512 " not in listed


def test_dry_run_lists_the_model_layers():
    listed = dry_run("--grids", "models,models_bwd")
    assert "models: 49 points" in listed and "models_bwd: 11 points" in listed
    assert "Qwen2.5-7B prefill 4×3000: B4 N3000 H28/4 d128 bf16 causal " in listed
    assert "FLUX.1 1024px (4096+512): B1 N4608 H24 d128 bf16 " in listed
    assert "DeepSeek-V3 TP8 MLA prefill 16k: B1 N16384 H16 d192/128 bf16 causal " in listed
    assert ("DeepSeek-V2-Lite MLA fine-tuning 4×2000: B4 N2000 H16 d192/128 bf16 causal "
            "fwd+bwd ") in listed
    assert "60 points" in listed
    matched = dry_run("--grids", "models", "--match", "^Llama-3-8B")
    assert "models: 4 points" in matched
    mla = dry_run("--grids", "models,models_bwd", "--match", "d192/128")
    assert "models: 3 points" in mla and "models_bwd: 2 points" in mla


def test_report_sets_each_model_layer_against_the_best_alternative_and_cudnn():
    results = synthetic_results({"models": grid.models_points(),
                                 "models_bwd": grid.models_bwd_points()})
    md = report.markdown(results, "x.json")
    assert "## Model shapes: forward (TFLOP/s)" in md
    assert "## Model shapes: forward + backward (TFLOP/s)" in md
    lines = md.splitlines()
    flux = next(line for line in lines if line.startswith("| FLUX.1 1024px (4096+512) †"))
    # cuda_naive skipped (predicted over 2 s), cuda_tiled at 12 against cudnn at 550, best.
    assert flux.startswith("| FLUX.1 1024px (4096+512) † | 1×4608 | 24 | 128 | bf16 |  | "
                           "skip | 12.0 | cudnn | 550 |")
    assert flux.count(f"{report.sig(12 / 550, 2)}×") == 2  # vs best and vs cudnn
    qwen = next(line for line in lines if line.startswith("| Qwen2.5-7B prefill 4×3000"))
    assert "| 4×3000 | 28/4 | 128 | bf16 | causal |" in qwen
    mla = next(line for line in lines if line.startswith("| DeepSeek-V3 TP8 MLA prefill 16k"))
    assert "| 1×16384 | 16 | 192/128 | bf16 | causal |" in mla
    # flash declines v's head_dim of its own at the MLA layers, and the report says why.
    assert ("- `flash` unsupported at 5 point(s) (models, models_bwd): No available kernel: "
            "v's head_dim") in md
    assert "- `cuda_tiled`: 0 of 49 layers at least as fast as the best alternative" in md
    assert "- `auto`: 11 of 11 layers at least as fast as cuDNN" not in md  # 200 < 550
    assert "- `auto`: 0 of 11 layers at least as fast as cuDNN" in md
    line = report.history_line(results, "x.json")
    assert line["grids"] == {"models": 49, "models_bwd": 11}
    assert line["ratios"]["cuda_tiled/cudnn models"][3] == 49
    assert line["ratios"]["auto/best models fwd+bwd GQA"][3] == 4
    head = report.headline(results)
    assert "cuda_tiled models bf16" in head and "cuda_tiled models f16" in head


def test_mla_layers_count_v_head_dim_in_flops_bytes_labels_and_rows():
    from result_rows import point_of
    mla = {p.name: p for p in grid.models_points() + grid.models_bwd_points()
           if p.head_dim_v != p.head_dim}
    assert {name: (p.dtype, p.batch, p.seqlen, p.heads, p.heads_kv, p.head_dim, p.head_dim_v,
                   p.causal, p.pass_) for name, p in mla.items()} == {
        "DeepSeek-V3 TP8 MLA prefill 4096": ("bf16", 1, 4096, 16, 16, 192, 128, "top_left",
                                             "fwd"),
        "DeepSeek-V3 TP8 MLA prefill 16k": ("bf16", 1, 16384, 16, 16, 192, 128, "top_left",
                                            "fwd"),
        "DeepSeek-V2-Lite MLA prefill 4×2000": ("bf16", 4, 2000, 16, 16, 192, 128, "top_left",
                                                "fwd"),
        "DeepSeek-V3 TP8 MLA fine-tuning 4096": ("bf16", 1, 4096, 16, 16, 192, 128,
                                                 "top_left", "fwd+bwd"),
        "DeepSeek-V2-Lite MLA fine-tuning 4×2000": ("bf16", 4, 2000, 16, 16, 192, 128,
                                                    "top_left", "fwd+bwd")}
    prefill = mla["DeepSeek-V3 TP8 MLA prefill 4096"]
    assert prefill.label() == ("DeepSeek-V3 TP8 MLA prefill 4096: B1 N4096 H16 d192/128 bf16 "
                               "causal")
    # S = Q·Kᵀ at 192, P·V at 128: 2·B·H·N²·(192 + 128), halved for causal.
    assert prefill.flops() == 2 * 16 * 4096**2 * (192 + 128) / 2
    step = mla["DeepSeek-V3 TP8 MLA fine-tuning 4096"]
    assert step.flops() == 3.5 * prefill.flops()
    q_and_out = 4096 * 16 * (192 + 128) * 2  # bytes of q and out; k and v the same here
    assert prefill.min_bytes() == 2 * q_and_out and step.min_bytes() == 3 * prefill.min_bytes()
    plain = dataclasses.replace(prefill, head_dim_v=None, name=None)
    assert plain.head_dim_v == 192 and plain.label() == "B1 N4096 H16 d192 bf16 causal"
    assert plain.flops() == 4 * 16 * 4096**2 * 192 / 2
    windowed = dataclasses.replace(prefill, window=(1024, 0))
    pairs = grid.visible_pairs(4096, True, 1024, 0)
    assert windowed.flops() == 2 * 16 * (192 + 128) * pairs
    # Rows carry v's head_dim; rows from before it read as head_dim; two points apart only
    # in v's head_dim stay two points.
    row = synthetic_row(prefill, "cuda_tiled")
    assert (row["head_dim"], row["head_dim_v"]) == (192, 128) and point_of(row) == prefill
    old = synthetic_row(plain, "cuda_tiled")
    del old["head_dim_v"]
    assert point_of(old) == plain
    twin = dataclasses.replace(plain, name=prefill.name)
    rows = [synthetic_row(p, "cuda_tiled") for p in (prefill, twin)]
    assert len(report.merge_rounds(rows)) == 2 and len(report.by_point(rows, "models")) == 2


def test_two_models_layers_of_one_shape_stay_two_points():
    import models_report
    twins = [grid.Point("models", "bf16", 1, 8192, 32, 128, "top_left", heads_kv=8, name=name)
             for name in ("Llama-3-8B prefill 8192", "Mistral-7B prefill 8192")]
    rows = [synthetic_row(p, impl) for p in twins for impl in ("cuda_tiled", "cudnn")]
    assert len(report.merge_rounds(rows)) == 4
    assert len(report.by_point(rows, "models")) == 2
    from result_rows import point_of
    assert point_of(rows[0]) == twins[0]
    text = models_report.tally([("a", 1.2), ("b", 0.8), ("c", 0.9), ("d", 1.0)], "cuDNN")
    assert text.startswith("2 of 4 layers at least as fast as cuDNN")  # a tie counts
    assert text.endswith("slower at b (0.80×), c (0.90×)")
    assert models_report.tally([], "cuDNN") == ""
    many = models_report.tally([(f"layer {i}", 0.5 + i / 100) for i in range(10)], "cuDNN")
    assert many.endswith("layer 7 (0.57×) and 2 more")


def test_ring_model_hides_long_blocks_and_exposes_short_ones():
    import ring_model
    shape = ring_model.Shape(batch=1, heads=16, kv_heads=16, head_dim=128, dtype="bf16")
    # Blocks at 500 TFLOP/s forward and 400 backward, from 1k to 64k local tokens.
    sweep = []
    for i in range(7):
        local = 1024 << i
        work = 4 * 16 * local * (local / 2) * 128
        sweep.append({"local_seqlen": local, "fwd_ms": work / 500e9,
                      "bwd_ms": 2.5 * work / 400e9})
    blocks = ring_model.BlockTimes(sweep)
    assert blocks.ms(2048, "fwd_ms") == pytest.approx(sweep[1]["fwd_ms"])
    assert blocks.ms(3000, "fwd_ms") == pytest.approx(sweep[1]["fwd_ms"] * (3000 / 2048) ** 2)
    assert blocks.ms(1 << 17, "bwd_ms") == pytest.approx(sweep[-1]["bwd_ms"] * 4)
    # A pass hides its transfers from L = (bytes a token moves / bandwidth) · rate / (FLOPs
    # over L²): the heads cancel (16 and 16); the backward's rate counts 2.5× the work.
    threshold = ring_model.hiding_threshold(shape, blocks, 400.0)
    forward = 2 * 128 * 2 / 400e9 * 500e12 / (4 * 128 * 0.5)
    backward = (2 * 128 * 2 + 2 * 128 * 4) / 400e9 * 400e12 / (2.5 * 4 * 128 * 0.5)
    assert threshold == pytest.approx(max(forward, backward))

    def efficiency(gpus, exposed, tokens=1 << 20):
        return ring_model.predict(shape, blocks, 420.0, tokens, gpus, 400.0, 40.0, exposed,
                                  3000.0)["efficiency"]
    assert efficiency(2, 0.0) > 0.95
    assert efficiency(2, 1.0) < efficiency(2, 0.0)
    assert efficiency(512, 0.0) < efficiency(64, 0.0) < efficiency(8, 0.0)


def test_decode_grid_covers_the_issue_ranges_within_max_gb():
    import decode_grid
    points = grid.full_suite()["decode"]
    configs = [p.config for p in points]
    assert len(points) == 43 and {p.grid for p in points} == {"decode"}
    assert {c.batch for c in configs} == {1, 8, 32, 128}
    assert {c.length for c in configs} == {1024, 8192, 32768, 131072}
    assert {c.seqlen_q for c in configs} == {1, 4, 8}
    assert len({c for c in configs if c.seqlen_q == 8}) == 1
    assert {c.heads_q // c.heads_kv for c in configs} == {1, 4, 8}
    assert {c.head_dim for c in configs} == {64, 128, 256}
    assert {c.dtype for c in configs} == {"bf16", "f16"}
    assert {p.page_size for p in points} == {None, 16, 32, 64, 256}
    assert {p.page_size for p in points if p.config.dtype == "f16"} == {None, 64}
    assert all(p.cache_bytes() <= decode_grid.MAX_GB * 1e9 for p in points)
    labels = [p.label() for p in points]
    assert len(set(labels)) == len(labels)
    # decode.py's default rows are all among them; its one cache over --max-gb is not.
    default, skipped = decode_grid.selected(decode_grid.default_grid())
    assert {f"{c.name} {decode_grid.layout_name(page)}" for c in default
            for page in c.layouts} <= set(labels)
    assert [(c.name, page) for c, page, _ in skipped] == [("bf16 H32/8 d128 B128 L128k q1", None)]
    small = decode_grid.suite_points(max_gb=10)
    assert all(p.cache_bytes() <= 10e9 for p in small) and 0 < len(small) < len(points)
    quick = grid.quick_suite()["decode"]
    assert len(quick) == 5 and all(p in points for p in quick)


def test_decode_points_count_visible_pairs_and_regroup_into_configs():
    import decode_grid
    points = [p for p in grid.full_suite()["decode"]
              if p.label().startswith("bf16 H32/8 d128 B32 L32k q")]
    assert [p.label().split(" ", 5)[-1] for p in points] == [
        "q1 contiguous", "q1 paged16", "q1 paged32", "q1 paged64", "q1 paged256",
        "q4 contiguous", "q4 paged64", "q8 contiguous"]
    assert points[0].flops() == 4 * 32 * 32 * 128 * 32768
    # seqlen_q 4, bottom-right causal: the rows see L-3, L-2, L-1 and L keys.
    assert points[5].flops() == 4 * 32 * 32 * 128 * (4 * 32768 - 6)
    configs = decode_grid.configs_of(points[1:])
    assert [(c.seqlen_q, c.layouts) for c in configs] == [(1, (16, 32, 64, 256)), (4, (None, 64)),
                                                          (8, (None,))]
    assert points[1].cache_bytes() == 2 * 32 * 32768 * 8 * 128 * 2


def test_varlen_grid_draws_one_spread_of_lengths_per_total():
    import varlen_grid
    points = grid.full_suite()["varlen"]
    assert [(p.tokens, p.pass_) for p in points] == [
        (n, pass_) for pass_ in ("fwd", "fwd+bwd") for n in (16384, 32768, 65536)]
    for p in points:
        lengths = p.lengths()
        assert lengths == p.lengths()  # one fixed draw
        assert p.tokens <= sum(lengths) < p.tokens + varlen_grid.MIN_LENGTH
        assert all(16 <= n <= 8 * 1024 for n in lengths)
        assert len(set(lengths)) > len(lengths) // 2  # a spread, not equal sequences
        assert p.flops() == grid.PASS_FLOPS[p.pass_] * sum(4 * 32 * n * n * 128 / 2
                                                           for n in lengths)
    forward, both = points[0], points[3]
    assert forward.lengths() == both.lengths() and both.label() == forward.label() + " fwd+bwd"
    assert [p.tokens for p in grid.quick_suite()["varlen"]] == [16384, 16384]
    # The spread clips both ends: exp(0)·1024·0.73 = 747; a tiny draw gives 16; the last
    # sequence is cut to the total.
    draws = iter([0.0, -10.0, 1.0])
    assert varlen_grid.spread(2000, 1024, lambda: next(draws)) == [747, 16, 1237]


def test_varlen_script_draws_the_lengths_it_always_drew():
    torch = pytest.importorskip("torch")
    varlen = pytest.importorskip("varlen")  # imports flashattn too
    # The 16k batch of bench/varlen.py's published runs: 22 sequences, mean 744, max 2564.
    lengths = varlen.lengths_for(16384, 1024, torch.Generator().manual_seed(0))
    assert (len(lengths), sum(lengths), max(lengths)) == (22, 16384, 2564)


def decode_row(point, us, sdpa_us, copy_tb_s=3.0, sdpa_append_us=None):
    """A row as decode.run_config writes it, at `us` per step; sdpa_append_us None: a row from
    before PyTorch's append was timed."""
    c = point.config
    tb_s = c.kv_bytes_read() / (us * 1e-6) / 1e12
    return {"grid": "decode", "point": c.name, "layout": point.label().split()[-1],
            "dtype": c.dtype, "heads_q": c.heads_q, "heads_kv": c.heads_kv,
            "head_dim": c.head_dim, "batch": c.batch, "length": c.length,
            "seqlen_q": c.seqlen_q, "page_size": point.page_size, "flashattn_us": us,
            "host_us": 80.0, "checked_us": us + 100, "graph_us": 0.98 * us,
            "graph_equals_eager": True, "tb_s": tb_s, "of_copy": tb_s / copy_tb_s,
            "graph_over_eager": 0.98, "sdpa_backend": "cudnn", "sdpa_us": sdpa_us,
            "speedup": sdpa_us / us, "rel_l2": 3e-3,
            **({} if sdpa_append_us is None else {
                "sdpa_append_us": sdpa_append_us, "speedup": sdpa_append_us / us,
                "speedup_attention_alone": sdpa_us / us})}


# Synthetic varlen calls: (name, TFLOP/s); None: the call fails.
VARLEN_RATES = (("flashattn varlen (auto)", 300.0),
                ("flashattn dense cuda_mma at mean length", 200.0),
                ("flashattn dense cuda_wgmma at mean length", 400.0),
                ("torch sdpa padded (flash)", 50.0), ("torch sdpa padded (efficient)", None),
                ("torch sdpa padded (cudnn)", 100.0), ("torch sdpa per sequence", 150.0))


def varlen_row(point):
    calls = []
    for name, rate in VARLEN_RATES:
        if rate is None:
            calls.append((name, math.nan, math.nan, "RuntimeError: No available kernel."))
        else:
            calls.append((name, point.flops() / (rate * 1e9), rate, None))
    return point.row(calls)


def script_results():
    decode_points = grid.full_suite()["decode"]
    results = synthetic_results({})
    results["decode_rows"] = [decode_row(p, 100.0, 50.0) for p in decode_points[:-1]]
    results["decode_rows"].append({"grid": "decode", "point": decode_points[-1].config.name,
                                   "layout": "contiguous", "note": "out of memory (...)"})
    results["varlen_rows"] = [varlen_row(p) for p in grid.full_suite()["varlen"]]
    return results


def test_report_gives_the_decode_and_varlen_grids_their_sections():
    results = script_results()
    md = report.markdown(results, "x.json")
    lines = md.splitlines()
    assert "## Decode over a KV cache (µs, TB/s)" in md and "## Accuracy" not in md
    assert ("| point | layout | flashattn µs | TB/s | of copy | checked µs | graph µs | "
            "graph/eager |") in md
    paged = next(x for x in lines if x.startswith("| bf16 H32/8 d128 B32 L32k q1 | paged64 |"))
    # 2·32·32768·8·128·2 bytes in 100 µs: 42.9 TB/s, 1432% of the 3 TB/s copy.
    assert paged.startswith("| bf16 H32/8 d128 B32 L32k q1 | paged64 | 100.0 | 42.95 | 1432% |")
    assert "| 0.98 |" in paged and "| cudnn | 0.50× |" in paged
    assert "Not measured: bf16 H32/8 d128 B32 L32k q8 contiguous (out of memory (...))." in md
    assert "- flashattn/best decode 0.50× (0.50-0.50) over 42 rows, 0 at or above 1" in md
    for pass_ in ("forward", "forward + backward"):
        assert f"## Variable-length prefill: {pass_} (TFLOP/s)" in md
    point = grid.full_suite()["varlen"][0]
    lengths = point.lengths()
    batch = next(x for x in lines if x.startswith(f"| 16384 | {len(lengths)} |"))
    assert batch.startswith(f"| 16384 | {len(lengths)} | {16384 // len(lengths)} | "
                            f"{max(lengths)} | 300 | 200 | 400 | 50.0 | error | 100 | 150 |")
    # Ours at 300 against the per-sequence way at 150 (same work) and dense wgmma at 400.
    assert batch.endswith("| torch sdpa per sequence | 2.00× | 0.750× |")
    assert "- torch sdpa padded (efficient): RuntimeError: No available kernel. (3 batch(es))" in md


def test_history_and_headline_carry_the_decode_and_varlen_ratios(tmp_path):
    results = script_results()
    line = report.history_line(results, "x.json")
    assert line["kind"] == "bench/run" and line["grids"] == {"decode": 43, "varlen": 6}
    ratios = line["ratios"]
    assert ratios["flashattn/best decode"] == [0.5, 0.5, 0.5, 42, 0]
    assert ratios["flashattn/best decode paged"][3] == 14
    assert ratios["graph/eager decode"] == [1.02, 1.02, 1.02, 42, 42]
    assert ratios["flashattn/copy decode"][3] == 42
    assert ratios["flashattn/best varlen"] == [2.0, 2.0, 2.0, 3, 3]
    assert ratios["flashattn/dense varlen fwd+bwd"] == [0.75, 0.75, 0.75, 3, 0]
    head = report.headline(results)
    assert "flashattn/best varlen fwd+bwd 2.0× (2.0-2.0) over 3 points, 3 at or above 1" in head
    assert "graph/eager decode 1.0× (1.0-1.0) over 42 points" in head
    suite = pytest.importorskip("suite")  # imports torch and triton
    path = tmp_path / "x.json"
    suite.write_json(results, path)
    again = json.loads(path.read_text())
    assert again["decode_rows"] == results["decode_rows"]
    assert again["varlen_rows"] == results["varlen_rows"] and again["rows"] == []


def test_decode_headline_is_over_pytorch_doing_the_same_work():
    """The step appends its keys and values: PyTorch's time for that work (its slice copies
    and the SDPA call) is the headline's, the SDPA call alone a ratio of its own."""
    points = grid.full_suite()["decode"][:4]
    results = dict(synthetic_results({}), rows=[])
    results["decode_rows"] = [decode_row(p, 100.0, 50.0, sdpa_append_us=125.0) for p in points]
    ratios = report.history_line(results, "x.json")["ratios"]
    assert ratios["flashattn/best decode"] == [1.25, 1.25, 1.25, 4, 4]
    assert ratios["flashattn/best decode, attention alone"] == [0.5, 0.5, 0.5, 4, 0]
    md = report.markdown(results, "x.json")
    assert "| SDPA µs | SDPA + append µs | SDPA backend | speedup | vs SDPA alone |" in md
    assert "| 50.0 | 125.0 | cudnn | 1.25× | 0.50× |" in md


def test_dry_run_lists_the_decode_and_varlen_grids():
    listed = dry_run("--grids", "decode,varlen")
    assert "decode: 43 points" in listed and "varlen: 6 points" in listed
    assert "bf16 H32/8 d128 B32 L32k q8 contiguous " in listed
    assert "f16 H32/8 d128 B32 L32k q1 paged64 " in listed
    assert " H32/8 d128 bf16 causal fwd+bwd " in listed and "65536 tokens, " in listed
    paged = dry_run("--grids", "decode", "--match", "paged64$")
    assert "decode: 5 points" in paged


def test_script_grids_put_each_grids_rows_under_its_key(tmp_path, monkeypatch):
    """bench/run's glue around the scripts, their GPU measurements stubbed."""
    torch = pytest.importorskip("torch")
    script_grids = pytest.importorskip("script_grids")  # imports flashattn and triton too
    import decode
    import decode_grid
    import varlen
    timed = []

    def run_config(config, args, copy_tb_s):
        timed.append((config.name, config.layouts, copy_tb_s, args.budget_ms))
        if config.seqlen_q == 4:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        return [dict(point=config.name, layout=decode_grid.layout_name(page), flashattn_us=1.0)
                for page in (None,) + tuple(p for p in config.layouts if p is not None)]
    monkeypatch.setattr(decode, "run_config", run_config)
    monkeypatch.setattr(varlen, "measure", lambda lengths, backward: [
        (name, math.nan, math.nan, "no") if rate is None else (name, 1.0, rate, None)
        for name, rate in VARLEN_RATES])
    points = [p for p in grid.full_suite()["decode"] if "B32 L32k q" in p.label() and
              p.label().startswith("bf16 H32/8 d128") and "paged16" not in p.label()
              and "paged32" not in p.label()]
    results = dict(synthetic_results({}), rows=[])
    path = tmp_path / "run.json"
    script_grids.run_grid("decode", points, results, path)
    script_grids.run_grid("varlen", grid.quick_suite()["varlen"], results, path)
    assert [(name.split()[-1], layouts) for name, layouts, _, _ in timed] == [
        ("q1", (None, 64, 256)), ("q4", (None, 64)), ("q8", (None,))]
    assert {(copy, budget) for _, _, copy, budget in timed} == {(3.0, 30.0)}
    rows = json.loads(path.read_text())["decode_rows"]
    assert [(r["point"].split()[-1], r["layout"]) for r in rows] == [
        ("q1", "contiguous"), ("q1", "paged64"), ("q1", "paged256"), ("q4", "contiguous"),
        ("q4", "paged64"), ("q8", "contiguous")]
    assert {r["grid"] for r in rows} == {"decode"}
    assert rows[3]["note"].startswith("out of memory (CUDA out of memory.")
    varlen_rows = json.loads(path.read_text())["varlen_rows"]
    assert [r["pass"] for r in varlen_rows] == ["fwd", "fwd+bwd"]
    assert varlen_rows[0]["speedup"] == 1.0 and varlen_rows[0]["of_dense"] == 0.75


def test_host_time_runs_every_piece_on_the_cpu(capsys, monkeypatch):
    """bench/host_time.py on CPU tensors: every piece runs (the library's calls keep the
    tensors their views point into alive) and prints a time."""
    pytest.importorskip("torch")
    host_time = pytest.importorskip("host_time")  # imports flashattn too
    monkeypatch.setattr(sys, "argv", ["host_time.py", "--device", "cpu", "--shape",
                                      "1,2,8,8", "--dtype", "f32", "--calls", "3"])
    host_time.main()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("CPU; host time per call")
    assert len(lines) == 13 and all(line.endswith(" us") for line in lines[1:])
