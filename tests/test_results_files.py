"""The committed results: whole, self-consistent, one latest file per device."""

import importlib.util
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).parents[1]
RESULTS = ROOT / "results"
# The single-device files; multi_gpu_*, training_step_*, decoding_step_* and
# model_shapes_* hold other benchmarks.
OTHER_BENCHMARKS = ("multi_gpu_", "training_step_", "decoding_step_", "model_shapes_")
BENCHMARK_FILES = sorted(p for p in (RESULTS / "benchmarks").glob("*.json")
                         if not p.name.startswith(OTHER_BENCHMARKS))
MODEL_SHAPE_FILES = sorted((RESULTS / "benchmarks").glob("model_shapes_*.json"))
#: What the harness times on a GPU.
GPU_IMPLS = {"gpu_ops", "apex_seed", "pallas", "xla"}
FIELDS = {"device", "jax_version", "commit", "date", "op", "impl", "dtype", "rows", "row_len",
          "median_us", "bytes", "gbps", "copy_gbps"}
#: What a profile adds to a GPU run's records (rms_norm_bench.kernel_record).
PROFILED_FIELDS = {"busy_us", "span_us", "kernels"}


def _bench(name="rms_norm_bench"):
    """The benchmark script `name` of benchmarks/, as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_one_results_root_and_no_history_in_the_tree():
    assert not (ROOT / "benchmarks" / "results").exists()
    for path in RESULTS.rglob("*"):
        # no earlier runs beside the latest: no file named after a commit
        assert not re.search(r"(^|_)[0-9a-f]{7}(_|\.|$)", path.name), path


@pytest.mark.parametrize("path", BENCHMARK_FILES, ids=lambda p: p.name)
def test_a_device_file_is_one_whole_run_of_every_case(path):
    bench = _bench()
    records = json.loads(path.read_text())
    assert path.stem == bench.device_slug(records[0]["device"])
    for record in records:
        assert FIELDS <= set(record) <= FIELDS | PROFILED_FIELDS
        for key in ("device", "jax_version", "commit"):
            assert record[key] == records[0][key], key
    timed = {(r["op"], r["impl"], r["dtype"], r["rows"], r["row_len"]) for r in records}
    assert len(timed) == len(records)  # no case twice
    expected = {(op, impl, dtype, rows, row_len)
                for dtype, rows, row_len in bench.GPU_CASES
                for op in ("fwd", "fwd_bwd") for impl in GPU_IMPLS}
    assert timed == expected


@pytest.mark.parametrize("path", MODEL_SHAPE_FILES, ids=lambda p: p.name)
def test_a_model_shape_file_is_one_whole_run_of_the_model_shape_set(path):
    bench = _bench()
    records = json.loads(path.read_text())
    assert path.stem == "model_shapes_" + bench.device_slug(records[0]["device"])
    for record in records:
        assert FIELDS <= set(record) <= FIELDS | PROFILED_FIELDS
        assert all(record[key] == records[0][key] for key in ("device", "jax_version", "commit"))
    timed = [(r["op"], r["impl"], r["dtype"], r["rows"], r["row_len"]) for r in records]
    assert sorted(timed) == sorted((op, impl, *case) for case in bench.MODEL_CASES
                                   for op in ("fwd", "fwd_bwd") for impl in bench.MODEL_IMPLS)


@pytest.mark.parametrize("path", BENCHMARK_FILES + MODEL_SHAPE_FILES, ids=lambda p: p.name)
def test_bandwidths_follow_from_bytes_and_times(path):
    bench = _bench()
    for r in json.loads(path.read_text()):
        assert r["bytes"] == bench.minimum_bytes(r["op"], r["dtype"], r["rows"], r["row_len"])
        # Both are rounded: the time to 0.01 us (for ops of a few microseconds,
        # a part in a thousand), the bandwidth to 0.1 GB/s.
        fastest, slowest = r["median_us"] - 0.005, r["median_us"] + 0.005
        assert r["bytes"] / slowest / 1e3 - 0.05 <= r["gbps"] <= r["bytes"] / fastest / 1e3 + 0.05
        assert 0 < r["copy_gbps"] < 10_000 and r["median_us"] > 0


@pytest.mark.parametrize("path", BENCHMARK_FILES, ids=lambda p: p.name)
def test_profiled_kernels_fit_in_the_profiled_span(path):
    check_profiled_records(json.loads(path.read_text()))


def check_profiled_records(records):
    """The kernel profiles of a run's records (rms_norm_bench.kernel_record)
    are whole and consistent; also used on a run the harness tests make."""
    profiled = [r for r in records if "kernels" in r]
    # a run profiles every record, or (older runs) gpu_ops' alone, or none
    assert profiled in ([], [r for r in records if r["impl"] == "gpu_ops"], records)
    for r in profiled:
        times = [us for _, us in r["kernels"]]
        assert times == sorted(times, reverse=True)
        # one kernel's calls are one after another, but their times in the
        # profile may overlap a little where one call ends and the next starts
        assert 0 < times[0] <= 1.02 * r["busy_us"] and r["busy_us"] <= r["span_us"] + 0.01


@pytest.mark.parametrize("path", sorted((RESULTS / "benchmarks").glob("training_step_*.json")),
                         ids=lambda p: p.name)
def test_a_training_step_file_is_one_run_of_every_norm(path):
    bench = _bench("training_step_bench")
    records = json.loads(path.read_text())
    assert [r["norm"] for r in records] == list(bench.NORMS)
    for key in ("device", "jax_version", "commit", "date", "config", "steps", "repeats"):
        assert len({json.dumps(r[key]) for r in records}) == 1, key
    assert path.name == f"training_step_{bench.rms_norm_bench.device_slug(records[0]['device'])}.json"
    config = records[0]["config"]
    for r in records:
        tokens = config["batch"] * config["seq"]
        assert r["tokens_per_s"] == pytest.approx(tokens / (r["median_ms"] / 1e3), rel=1e-3)
        if "kernel_ms" in r:  # from a profile of as many steps, which the GPU ran
            assert 0 < r["kernel_ms"] <= 1.05 * r["median_ms"]
            assert (r["gpu_ops_kernel_ms"] > 0) == r["norm"].startswith("gpu_ops")
            assert r["gpu_ops_kernel_ms"] < r["kernel_ms"]
        if "busy_ms" in r:  # from the same profile: the GPU busy within its span
            assert 0 < r["busy_ms"] <= min(r["kernel_ms"] + 1e-3, r["span_ms"])
        if "profiled_ms" in r:  # the profiled steps' own time covers their kernels' span
            assert r["profiled_ms"] >= r["span_ms"]
        for state in r.get("gpu_state", {}).values():  # nvidia-smi's samples
            assert state["samples"] > 0 and 0 <= state["power_capped"] <= 1
            assert 0 < state["sm_clock_mhz"] <= state["max_sm_clock_mhz"]
        if "top_kernels" in r:  # the largest kernels of that profile, largest first
            times = [ms for _, ms in r["top_kernels"]]
            assert times == sorted(times, reverse=True) and 0 < sum(times) <= r["kernel_ms"]
        if "float8_matmuls" in r:  # only the float8 variant's, five per layer on Hopper
            want = 5 * config["layers"] if r["norm"] == "gpu_ops_fp8" else 0
            assert r["float8_matmuls"] == want, r["norm"]
    # every norm but none at all computes the same model from the same start
    # (with the float8 variant's projections rounded, to a part in a thousand)
    first_losses = [r["first_loss"] for r in records if r["norm"] != "identity"]
    assert max(first_losses) == pytest.approx(min(first_losses), rel=1e-3)


@pytest.mark.parametrize("path", sorted((RESULTS / "benchmarks").glob("decoding_step_*.json")),
                         ids=lambda p: p.name)
def test_a_decoding_step_file_is_one_run_of_every_norm_at_every_batch(path):
    bench = _bench("decoding_step_bench")
    records = json.loads(path.read_text())
    for key in ("device", "jax_version", "commit", "date", "config", "steps", "repeats"):
        assert len({json.dumps(r[key]) for r in records}) == 1, key
    assert path.name == f"decoding_step_{bench.rms_norm_bench.device_slug(records[0]['device'])}.json"
    batches = list(dict.fromkeys(r["batch"] for r in records))
    assert [(r["batch"], r["norm"]) for r in records] == [
        (batch, norm) for batch in batches for norm in bench.NORMS]
    for batch in batches:
        by_norm = {r["norm"]: r for r in records if r["batch"] == batch}
        for r in by_norm.values():
            assert r["median_us"] > 0
            assert r["jnp_over_this"] == pytest.approx(
                by_norm["jnp"]["median_us"] / r["median_us"], rel=2e-3)


def test_every_gpu_machine_summary_says_what_ran_where():
    summaries = sorted((RESULTS / "gpu").glob("*.json"))
    assert summaries
    assert summaries == sorted((RESULTS / "gpu").iterdir())  # summaries, no logs
    for path in summaries:
        summary = json.loads(path.read_text())
        assert summary["machine"]["gpu"].startswith("NVIDIA H"), path
        assert summary["machine"]["jax"].startswith("0."), path
        assert summary["checks"], path
        for check in summary["checks"]:
            assert re.fullmatch(r"[0-9a-f]{7,40}", check["commit"]), (path, check)
            assert re.match(r"20\d\d-\d\d-\d\dT", check["date"]), (path, check)
            assert check["check"] in ("tests", "chapters (nbval)", "compute-sanitizer",
                                      "fp8 matmul", "sharding collectives", "sweep",
                                      "sweep (plans without clusters)", "property test",
                                      "template", "template compute-sanitizer", "recipes",
                                      "recipes compute-sanitizer"), path
            if check["check"].endswith("compute-sanitizer"):
                assert check["tools"], (path, check)
            elif check["check"] == "sharding collectives":
                assert check["devices"] > 1 and check["programs"], (path, check)
            elif check["check"] == "fp8 matmul":
                assert isinstance(check["fp8_matmul"], bool) and check["matmul_lines"], path
            else:  # a run cut off by a time limit counts what it got through
                assert check["passed"] > 0, (path, check)
                failed = check.get("failed", 0) + (0 if check["completed"] else
                                                   check.get("errors", 0))
                assert len(check["failures"]) == failed, (path, check)
