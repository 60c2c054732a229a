"""The book's readers of the results files (chapters/benchmark_results.py),
on a model-shape run the harness writes on this machine."""

import importlib.util
import json
import pathlib

import matplotlib
import pytest

matplotlib.use("Agg")
ROOT = pathlib.Path(__file__).parents[1]


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model_shape_run(tmp_path_factory):
    bench = _load("benchmarks/rms_norm_bench.py", "bench")
    out = tmp_path_factory.mktemp("run") / "model_shapes.json"
    bench.main(["--cases", "model", "--out", str(out), "--repeats", "1", "--calls", "1"])
    return json.loads(out.read_text())


def test_speedups_over_xla_pair_each_case(model_shape_run):
    results = _load("chapters/benchmark_results.py", "benchmark_results")
    for op in ("fwd", "fwd_bwd"):
        speedups = results.speedups_over_xla(model_shape_run, op)
        times = {(r["impl"], r["dtype"], r["rows"], r["row_len"]): r["median_us"]
                 for r in model_shape_run if r["op"] == op}
        assert len(speedups) == len(times) // 2
        for (dtype, rows, n), speedup in speedups.items():
            assert speedup == times["xla", dtype, rows, n] / times["gpu_ops", dtype, rows, n]


def test_the_model_shape_figure_has_a_line_per_row_length_and_dtype(model_shape_run):
    results = _load("chapters/benchmark_results.py", "benchmark_results")
    fig = results.model_shape_figure(model_shape_run)
    lines = [line for ax in fig.axes for line in ax.get_lines() if line.get_marker() == "o"]
    cases = {(r["dtype"], r["row_len"]) for r in model_shape_run}
    assert len(lines) == 2 * len(cases)  # forward, and forward + backward


def test_the_model_shape_summary_counts_every_case_once(model_shape_run):
    results = _load("chapters/benchmark_results.py", "benchmark_results")
    summary = results.model_shape_summary(model_shape_run)
    cases = {(r["op"], r["dtype"], r["rows"], r["row_len"]) for r in model_shape_run}
    assert sum(count for *_, count in summary) == len(cases)
    for op, dtype, family, least, most, slower, count in summary:
        speedups = [s for (d, rows, n), s in results.speedups_over_xla(model_shape_run, op).items()
                    if d == dtype and results.model_shape_family(rows, n) == family]
        assert (least, most, slower, count) == (min(speedups), max(speedups),
                                                sum(s < 1 for s in speedups), len(speedups))


def test_the_families_of_the_model_shape_set():
    results = _load("chapters/benchmark_results.py", "benchmark_results")
    assert results.model_shape_family(262_144, 128) == "QK-norm"
    assert results.model_shape_family(8, 4_096) == "decoding"
    assert results.model_shape_family(65, 4_096) == "prefill and training"
