"""The benchmark harness runs (small, on CPU) and writes well-formed records."""

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess

import jax
import numpy as np
import pytest

from gpu_ops import kernel_plans
from gpu_ops.kernel_plans import H100, PATHS, kernel_plan

BENCHMARKS = pathlib.Path(__file__).parents[1] / "benchmarks"
FIELDS = {"device", "jax_version", "commit", "date", "op", "impl", "dtype", "rows",
          "row_len", "median_us", "bytes", "gbps", "copy_gbps"}


def _load(name):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="the GPU case list is long")
def test_harness_writes_records(tmp_path):
    bench = _load("rms_norm_bench")
    out = tmp_path / "results.json"
    bench.main(["--out", str(out), "--repeats", "1", "--calls", "1"])
    records = json.loads(out.read_text())
    assert {r["impl"] for r in records} == {"gpu_ops", "xla"}
    assert {r["op"] for r in records} == {"fwd", "fwd_bwd"}
    for r in records:
        assert set(r) == FIELDS
        assert r["median_us"] > 0 and r["gbps"] == pytest.approx(r["bytes"] / r["median_us"] / 1e3, rel=0.01, abs=0.06)


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="the GPU case list is long")
def test_harness_runs_only_the_cases_and_implementations_asked_for(tmp_path):
    bench = _load("rms_norm_bench")
    out = tmp_path / "results.json"
    row_len = bench.CPU_CASES[-1][2]
    bench.main(["--out", str(out), "--repeats", "1", "--calls", "1", "--row-len", str(row_len),
                "--impl", "gpu_ops"])
    records = json.loads(out.read_text())
    assert records and {r["row_len"] for r in records} == {row_len}
    assert {r["impl"] for r in records} == {"gpu_ops"}


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="the GPU case list is long")
def test_a_resumed_run_keeps_whole_cases_and_measures_a_cut_one_again(tmp_path):
    bench = _load("rms_norm_bench")
    out = tmp_path / "results.json"
    args = ["--out", str(out), "--repeats", "1", "--calls", "1"]
    bench.main(args)
    whole = json.loads(out.read_text())
    first_case = [r for r in whole if r["row_len"] == whole[0]["row_len"]
                  and r["dtype"] == whole[0]["dtype"] and r["rows"] == whole[0]["rows"]]
    # cut off in case two, whose one record is marked to see it is not kept
    cut = first_case + [{**whole[len(first_case)], "median_us": -1.0}]
    out.write_text(json.dumps(cut))
    bench.main([*args, "--resume"])
    resumed = json.loads(out.read_text())
    assert resumed[:len(first_case)] == first_case  # kept, not measured again
    timed = [(r["op"], r["impl"], r["dtype"], r["rows"], r["row_len"]) for r in resumed]
    assert sorted(timed) == sorted((r["op"], r["impl"], r["dtype"], r["rows"], r["row_len"])
                                   for r in whole)
    assert all(r["median_us"] > 0 for r in resumed)  # the cut case is timed again, whole


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="the GPU case list is long")
@pytest.mark.parametrize("other_run", [{"commit": "0" * 40}, {"jax_version": "0.0.1"},
                                       {"plan_without": "wide_rows"},
                                       {"plan": {"forward": "general", "backward": "general"}}])
def test_a_resumed_run_measures_again_what_another_run_measured(tmp_path, other_run):
    # Another commit's, JAX's or plan setting's records, or a partial run's (which
    # name gpu_ops' kernel paths), are not this run's: a file resumed from them
    # would mix two runs.
    bench = _load("rms_norm_bench")
    out = tmp_path / "results.json"
    args = ["--out", str(out), "--repeats", "1", "--calls", "1", "--dtype", "float32"]
    bench.main(args)
    whole = json.loads(out.read_text())
    out.write_text(json.dumps([{**r, **other_run} if r["impl"] == "gpu_ops" else r
                               for r in whole]))
    bench.main([*args, "--resume"])
    resumed = json.loads(out.read_text())
    assert len(resumed) == len(whole)
    assert all(key not in r or r[key] != value
               for r in resumed for key, value in other_run.items())


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="the GPU case list is long")
def test_harness_leaves_paths_out_only_where_told(tmp_path, capsys):
    bench = _load("rms_norm_bench")
    with pytest.raises(SystemExit):
        bench.main(["--without", "row_teams"])
    assert "give --out" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--without", "fastest", "--out", str(tmp_path / "a.json")])
    assert "not among the paths" in capsys.readouterr().err
    assert kernel_plans.left_out() == ((), False)  # the refused calls set nothing
    out = tmp_path / "without.json"
    try:
        bench.main(["--out", str(out), "--repeats", "1", "--calls", "1", "--row-len", "1024",
                    "--dtype", "float32", "--without", "block_rows", "row_teams"])
        assert kernel_plans.left_out() == (("block_rows", "row_teams"), False)
    finally:
        kernel_plans.leave_out()  # the full plans for the tests after this one
    records = json.loads(out.read_text())
    assert records and all(r["plan_without"] == "block_rows,row_teams" for r in records)


def test_a_case_of_a_float32_weight_is_planned_with_it():
    """A record names the paths of x's dtype with the weight's: rows of a
    cluster take the general forward with a float32 weight, row teams
    without."""
    bench = _load("rms_norm_bench")
    rows, row_len = 1_024, 32_768
    assert bench.planned_paths(("bfloat16/float32", rows, row_len), H100) == {
        d: kernel_plan(d, (rows, row_len), "bfloat16", H100, weight_dtype="float32")["path"]
        for d in ("forward", "backward")}
    assert bench.planned_paths(("bfloat16/float32", rows, row_len), H100)["forward"] == "general"
    assert bench.planned_paths(("bfloat16", rows, row_len), H100)["forward"] == "row_teams"


def test_the_path_cases_take_every_kernel_path_of_an_h100():
    bench = _load("rms_norm_bench")
    taken = {direction: {bench.planned_paths(case, H100)[direction] for case in bench.PATH_CASES}
             for direction in ("forward", "backward")}
    backward_only = {"column_slices", "rows_and_columns"}
    assert taken["forward"] == set(PATHS) - backward_only - {"general"}
    assert taken["backward"] == {"short_rows", "column_slices", "rows_and_columns", "row_teams"}
    for dtype, rows, row_len in bench.PATH_CASES:
        assert rows * row_len * np.dtype(dtype).itemsize <= 64 << 20


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="runs where there is no GPU")
@pytest.mark.skipif(jax.default_backend() == "gpu", reason="the check is of a CPU")
@pytest.mark.parametrize("option", [["--cases", "paths"], ["--compare-paths"]])
def test_path_runs_need_a_gpu(capsys, option):
    bench = _load("rms_norm_bench")
    with pytest.raises(SystemExit):
        bench.main([*option, "--out", "/dev/null"])
    assert "time the kernel paths of a GPU" in capsys.readouterr().err


def test_harness_writes_a_partial_run_only_where_told(capsys):
    """--impl without --out would overwrite the device's results file with part of a run."""
    bench = _load("rms_norm_bench")
    with pytest.raises(SystemExit):
        bench.main(["--impl", "gpu_ops"])
    assert "give --out" in capsys.readouterr().err


@pytest.mark.parametrize("nbytes", [8 << 10, 8 << 20, 64 << 20, 256 << 20, 4 << 30])
def test_plan_sizes_chains_and_calls_on_the_fastest_possible_time(nbytes):
    bench = _load("rms_norm_bench")
    copy_gbps = 4000.0
    fastest = max(bench.MIN_OP_SECONDS, nbytes / (copy_gbps * 1e9))
    chain, calls = bench.plan(nbytes, copy_gbps, calls=2)
    assert bench.CHAIN <= chain <= bench.MAX_CHAIN and calls >= 2
    assert chain == bench.MAX_CHAIN or chain * fastest >= bench.MIN_CALL_SECONDS * (1 - 1e-9)
    assert calls * chain * fastest >= bench.MIN_RUN_SECONDS * (1 - 1e-9)
    # the smallest such counts: one op fewer per chain, or one call fewer, falls short
    assert chain == bench.CHAIN or (chain - 1) * fastest < bench.MIN_CALL_SECONDS
    assert calls == 2 or (calls - 1) * chain * fastest < bench.MIN_RUN_SECONDS


def test_plan_keeps_the_runs_of_tiny_ops_short():
    """An op of a few kilobytes still takes a kernel launch: its timed run
    lasts about MIN_RUN_SECONDS, not thousands of calls."""
    bench = _load("rms_norm_bench")
    chain, calls = bench.plan(8 << 10, 3000.0, calls=2)
    assert chain * calls * bench.MIN_OP_SECONDS <= 2 * bench.MIN_RUN_SECONDS


def test_chain_computes_every_steps_weight_gradient():
    """XLA computes each step's dweight (the step adds 0 * dweight to the weight)."""
    bench = _load("rms_norm_bench")
    step = bench.op_functions(bench.xla_rms_norm)["fwd_bwd"][1]

    def step_dropping_dweight(x, weight, dy):
        y, _, dx = step(x, weight, dy)
        return y, weight, dx

    x = jax.numpy.ones((64, 256), jax.numpy.bfloat16)
    weight = jax.numpy.ones((256,), jax.numpy.bfloat16)

    def reductions(fn):
        return bench.chained(fn, 3).lower((x, weight, x)).compile().as_text().count(" reduce(")

    # dropped, each step's dweight is dead code; kept, it is one more reduction a step
    assert reductions(step) == reductions(step_dropping_dweight) + 3


def test_timed_calls_take_the_last_calls_outputs_donated():
    """Each call's outputs alias its inputs, so XLA can run its recorded graph
    again as it is; the caller's own arrays stay usable."""
    bench = _load("rms_norm_bench")
    step = bench.op_functions(bench.xla_rms_norm)["fwd"][1]
    x = jax.numpy.ones((8, 128), jax.numpy.float32)
    args = (x, x[0], jax.numpy.zeros((), jax.numpy.float32))
    lowered = bench.chained(step, 2).lower(args).as_text()
    assert lowered.count("tf.aliasing_output") == len(args)
    assert bench.per_op_seconds(step, args, calls=2, repeats=1, chain=2) > 0
    assert not any(a.is_deleted() for a in args)


def test_a_profiled_timing_says_which_kernels_ran():
    bench = _load("rms_norm_bench")
    step = bench.op_functions(bench.xla_rms_norm)["fwd"][1]
    x = jax.numpy.ones((8, 128), jax.numpy.float32)
    seconds, kernels = bench.per_op_seconds(step, (x, x[0], x[0, 0]), calls=1, repeats=1,
                                            chain=2, profile=True)
    assert seconds > 0
    if jax.default_backend() == "gpu":
        # kernels may overlap (their times then add up to more than the span),
        # but the time in which one ran is at most the sum of their times and
        # lies within the span
        assert 0 < kernels["busy"] <= kernels["kernel"]
        assert kernels["busy"] <= kernels["span"]
        assert kernels["top_kernels"]
    else:  # the trace has no GPU plane
        assert kernels["kernel"] == 0 and kernels["top_kernels"] == []


def test_a_record_names_kernels_short_in_microseconds_per_op():
    bench = _load("rms_norm_bench")
    kernels = {"kernel": 46_123.0, "busy": 45_678.0, "span": 47_001.0, "top_kernels": [
        ["void gpu_ops::(anonymous namespace)::FastBackwardKernel<__nv_bfloat16, 1, false>"
         "(const __nv_bfloat16 *, const float *)", 26_504.0],
        ["loop_add_fusion", 312.0]]}
    assert bench.kernel_record(kernels) == {
        "busy_us": 45.68, "span_us": 47.0,
        "kernels": [["FastBackwardKernel", 26.5], ["loop_add_fusion", 0.31]]}


@pytest.mark.gpu
def test_a_gpu_run_records_the_kernels_of_every_implementation(tmp_path):
    bench = _load("rms_norm_bench")
    out = tmp_path / "results.json"
    bench.main(["--out", str(out), "--repeats", "3", "--case", "bfloat16", "512", "4096",
                "--impl", "gpu_ops", "xla"])
    from test_results_files import check_profiled_records

    run = json.loads(out.read_text())
    check_profiled_records(run)
    records = {(r["impl"], r["op"]): r for r in run}
    assert all("kernels" in r for r in run)
    for op in ("fwd", "fwd_bwd"):  # XLA's are its own fusions
        assert not {name for name, _ in records["xla", op]["kernels"]} & {
            "FastForwardKernel", "FastBackwardKernel", "SumPartialsKernel"}
    for op, ours in [("fwd", {"FastForwardKernel"}),
                     ("fwd_bwd", {"FastForwardKernel", "FastBackwardKernel", "SumPartialsKernel"})]:
        names = {name for name, _ in records["gpu_ops", op]["kernels"]}
        assert ours <= names, names


def _users_of_dy(fwd_bwd):
    """The equations of fwd_bwd(x, weight, dy)'s jaxpr that read dy."""
    x = jax.numpy.ones((8, 128), jax.numpy.float32)
    jaxpr = jax.make_jaxpr(fwd_bwd)(x, x[0], x).jaxpr
    if jaxpr.eqns[0].primitive.name == "jit":  # a jitted function: its body
        jaxpr = jaxpr.eqns[0].params["jaxpr"].jaxpr
    dy = jaxpr.invars[2]
    return dy, [eqn for eqn in jaxpr.eqns if dy in eqn.invars]


@pytest.mark.parametrize("harness", ["rms_norm_bench", "multi_gpu_bench naive",
                                     "multi_gpu_bench custom_partitioning"])
def test_backward_reads_dy_only_after_the_forward(harness):
    """The cotangent reaches the backward through a barrier with y, as in a network."""
    if harness == "rms_norm_bench":
        bench = _load("rms_norm_bench")
        fwd_bwd = bench.op_functions(bench.xla_rms_norm)["fwd_bwd"][0]
    else:  # the shard_map variant runs custom_partitioning's function per device
        bench = _load("multi_gpu_bench")
        fwd_bwd = {"naive": bench.naive_fwd_bwd,
                   "custom_partitioning": bench.partitioned_fwd_bwd}[harness.split()[1]]
    dy, users = _users_of_dy(fwd_bwd)
    assert [eqn.primitive.name for eqn in users] == ["optimization_barrier"]
    # the forward's y is the barrier's other operand
    assert len(users[0].invars) == 2 and users[0].invars[1] is dy


MULTI_FIELDS = {"device", "jax_version", "commit", "date", "dtype", "rows", "row_len",
                "num_devices", "variant", "op", "median_us"}


def test_multi_device_harness_writes_records(tmp_path):
    bench = _load("multi_gpu_bench")
    out = tmp_path / "multi.json"
    bench.main(["--out", str(out), "--repeats", "1", "--rows", "16", "--row-len", "128"])
    records = json.loads(out.read_text())
    counts = [n for n in (1, 2, 4, 8) if n <= len(jax.devices() if jax.default_backend() == "gpu"
                                                   else jax.devices("cpu"))]
    assert {(r["num_devices"], r["variant"], r["op"]) for r in records} == {
        (n, v, op) for n in counts for v in bench.VARIANTS for op in ("fwd", "fwd_bwd")}
    for r in records:
        assert set(r) == MULTI_FIELDS and r["median_us"] > 0


def nvcc():
    """The CUDA compiler the build would use (build.sh's search), or None."""
    default = "/usr/local/cuda/bin/nvcc"
    return (os.environ.get("CUDACXX") or shutil.which("nvcc")
            or (default if os.access(default, os.X_OK) else None))


@pytest.mark.skipif(nvcc() is None, reason="no nvcc: the build has no CUDA kernels either")
def test_the_seeds_kernels_compile(tmp_path):
    # Only GPU machines build the seed (GPU_OPS_APEX_SEED=1), so a change to
    # the handlers' checks it shares would otherwise first fail there.
    root = BENCHMARKS.parent
    subprocess.run([nvcc(), "-std=c++17", "-arch=sm_90", "--expt-relaxed-constexpr",
                    f"-I{root / 'gpu_ops' / 'csrc'}", f"-I{BENCHMARKS / 'apex_seed'}",
                    "-isystem", jax.ffi.include_dir(), "-c",
                    str(BENCHMARKS / "apex_seed" / "rms_norm_apex_seed.cu"),
                    "-o", str(tmp_path / "seed.o")], check=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,row_length", [("bfloat16", 4_096), ("float32", 1_000)])
def test_the_seeds_kernels_are_the_baseline(dtype, row_length):
    # Built beside gpu_ops with GPU_OPS_APEX_SEED=1 (tools/gpu_checks.sh does).
    import jax.numpy as jnp
    import reference

    _load("rms_norm_bench")  # puts benchmarks/ on the path
    import apex_seed
    assert apex_seed.built(), "GPU_OPS_APEX_SEED=1 ./build.sh builds them"
    kx, kd = jax.random.split(jax.random.key(4))
    x = jax.random.normal(kx, (300, row_length), jnp.float32).astype(dtype)
    weight = jnp.linspace(0.5, 1.5, row_length, dtype=dtype)
    dy = jax.random.normal(kd, x.shape, jnp.float32).astype(dtype)
    reference.check_op(jax.jit(apex_seed.rms_norm_apex_seed), x, weight, dy)
    hlo = jax.jit(apex_seed.rms_norm_apex_seed).lower(x, weight).compile().as_text()
    assert 'custom_call_target="gpu_ops_rms_norm_fwd_apex_seed"' in hlo


def test_each_path_is_compared_over_the_cases_that_take_it():
    bench = _load("rms_norm_bench")
    comparison = _load("path_comparison")

    def plan_on_h100(case):
        return bench.planned_paths(case, H100)

    taken = {path: comparison.cases_taking(path, bench.PATH_CASES, plan_on_h100)
             for path in comparison.leavable_paths()}
    assert "general" not in taken
    # the path cases take every path that can be left out, each at least once
    assert all(taken.values()), taken
    for path, cases in taken.items():
        for case in bench.PATH_CASES:
            assert (case in cases) == (path in plan_on_h100(case).values())


def test_a_comparison_row_says_what_leaving_a_path_out_costs():
    comparison = _load("path_comparison")
    case = {"dtype": "bfloat16", "rows": 2_048, "row_len": 16_384}
    plan = {"forward": "wide_rows", "backward": "row_teams"}
    with_every_path = [{**case, "op": "fwd", "impl": "gpu_ops", "median_us": 50.0, "plan": plan},
                       {**case, "op": "fwd", "impl": "xla", "median_us": 80.0}]
    without = {"wide_rows": [{**case, "op": "fwd", "impl": "gpu_ops", "median_us": 70.0,
                              "plan": {**plan, "forward": "block_rows"}}]}
    (row,) = comparison.comparison(with_every_path, without)
    assert row["left_out"] == "wide_rows" and row["gain"] == pytest.approx(0.4)
    assert (row["with_us"], row["without_us"], row["xla_us"]) == (50.0, 70.0, 80.0)
    assert row["plan_without"]["forward"] == "block_rows"
    assert "wide_rows" in comparison.row_line(row) and "+40.0%" in comparison.row_line(row)


def test_compare_paths_needs_an_output_file_and_chooses_its_own_runs(capsys):
    bench = _load("rms_norm_bench")
    for extra in ([], ["--out", "x.json", "--impl", "gpu_ops"],
                  ["--out", "x.json", "--without", "wide_rows"]):
        with pytest.raises(SystemExit):
            bench.main(["--compare-paths", *extra])
        assert "--compare-paths" in capsys.readouterr().err
    # refused, it leaves the plans of the tests after it in this process alone
    assert kernel_plans.left_out() == ((), False)


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="the GPU case list is long")
def test_a_run_of_one_case(tmp_path):
    bench = _load("rms_norm_bench")
    out = tmp_path / "results.json"
    dtype, rows, row_len = bench.CPU_CASES[-1]
    bench.main(["--out", str(out), "--repeats", "1", "--calls", "1",
                "--case", dtype, str(rows), str(row_len)])
    records = json.loads(out.read_text())
    assert {(r["dtype"], r["rows"], r["row_len"]) for r in records} == {(dtype, rows, row_len)}


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="the cases are a CPU's")
@pytest.mark.parametrize("case,message", [
    (["float32", "many", "16384"], "whole numbers"),
    (["float32", "3", "16384"], "not among the main cases"),
], ids=["not a number", "no such case"])
def test_a_case_that_is_not_one_is_refused(capsys, case, message):
    bench = _load("rms_norm_bench")
    with pytest.raises(SystemExit):
        bench.main(["--out", "/dev/null", "--case", *case])
    assert message in capsys.readouterr().err



def test_the_model_shape_set_is_where_models_call_the_norm():
    bench = _load("rms_norm_bench")
    cases = set(bench.MODEL_CASES)
    for dtype in ("bfloat16", "bfloat16/float32"):
        # hidden sizes, decoding (1 token) to training (65,536 tokens)
        for hidden in (2_048, 4_096, 5_120, 7_168, 8_192, 16_384):
            assert {(dtype, 1, hidden), (dtype, 65_536, hidden)} <= cases
        # QK-norm over head_dim, as the measurements found it slow
        assert {(dtype, 65_536, 128), (dtype, 262_144, 128), (dtype, 65_536, 64),
                (dtype, 16_384, 256)} <= cases
    assert max(row_len for _, _, row_len in cases) <= 32_768  # longer rows: correct, untuned


@pytest.mark.parametrize("op", ["fwd", "fwd_bwd"])
def test_a_chain_keeps_the_dtypes_of_a_float32_weight_of_bfloat16_x(op):
    """Every implementation gives y (and dx) in x's dtype, as a model's next
    matmul takes it: the chain's next x stays bfloat16, so every step times
    the case, not a float32 one."""
    bench = _load("rms_norm_bench")
    x = jax.numpy.ones((8, 128), jax.numpy.bfloat16)
    weight = jax.numpy.ones((128,), jax.numpy.float32)
    dy = jax.numpy.ones((8, 128), jax.numpy.bfloat16)
    for name, impl in bench.implementations(on_gpu=False).items():
        step = bench.op_functions(impl)[op][1]
        outputs = jax.eval_shape(bench.chained(step, 3), (x, weight, dy))
        assert [o.dtype for o in outputs] == [x.dtype, weight.dtype, dy.dtype], name


@pytest.mark.parametrize("op", ["fwd", "fwd_bwd"])
@pytest.mark.parametrize("dtype", ["bfloat16", "bfloat16/float32"])
def test_every_step_of_a_chain_runs_the_op(op, dtype):
    """XLA drops a step's results that no later step reads, barrier or not:
    each step must read the last one's, or the chain times one op."""
    bench = _load("rms_norm_bench")
    step = bench.op_functions(bench.implementations(on_gpu=False)["gpu_ops"])[op][1]
    x_dtype, w_dtype = bench.dtypes_of(dtype)
    x = jax.numpy.ones((8, 128), x_dtype)
    weight = jax.numpy.ones((128,), w_dtype)
    dy = jax.numpy.ones((8, 128), x_dtype) if op == "fwd_bwd" else jax.numpy.zeros((), x_dtype)
    hlo = bench.chained(step, 3).lower((x, weight, dy)).compile().as_text()
    for target in ["gpu_ops_rms_norm_fwd", *(["gpu_ops_rms_norm_bwd"] * (op == "fwd_bwd"))]:
        assert hlo.count(f'custom_call_target="{target}"') == 3, target


def test_bytes_of_a_float32_weight_of_bfloat16_x():
    bench = _load("rms_norm_bench")
    rows, n = 4, 128
    # read x (2 bytes a value) and w (4); write y (2, x's dtype) and inv_rms
    assert bench.minimum_bytes("fwd", "bfloat16/float32", rows, n) == rows * n * 4 + n * 4 + rows * 4
    # and the backward: read dy (2), x (2), w, inv_rms; write dx (2), dw
    assert bench.minimum_bytes("fwd_bwd", "bfloat16/float32", rows, n) == (
        rows * n * 4 + n * 4 + rows * 4 + rows * n * 6 + 2 * n * 4 + rows * 4)
    assert bench.minimum_bytes("fwd", "bfloat16", rows, n) == 2 * rows * n * 2 + n * 2 + rows * 4


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="the GPU case list is long")
def test_a_model_shape_run_times_gpu_ops_against_xla(tmp_path, monkeypatch):
    bench = _load("rms_norm_bench")
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    bench.main(["--cases", "model", "--repeats", "1", "--calls", "1"])
    (out,) = tmp_path.glob("model_shapes_*.json")
    records = json.loads(out.read_text())
    timed = {(r["op"], r["impl"], r["dtype"], r["rows"], r["row_len"]) for r in records}
    assert timed == {(op, impl, *case) for case in bench.CPU_MODEL_CASES
                     for op in ("fwd", "fwd_bwd") for impl in ("gpu_ops", "xla")}


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="the GPU case list is long")
def test_a_run_in_parts_joins_into_one_results_file(tmp_path, monkeypatch):
    """Processes on GPUs of their own each measure every N-th case; --join
    writes their records as one run's file, in the order of the cases."""
    bench = _load("rms_norm_bench")
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    parts = [tmp_path / f"part{i}.json" for i in range(2)]
    for i, part in enumerate(parts):
        bench.main(["--cases", "model", "--repeats", "1", "--calls", "1", "--part", f"{i}/2",
                    "--out", str(part)])
        measured = {(r["dtype"], r["rows"], r["row_len"]) for r in json.loads(part.read_text())}
        assert measured == {bench.CPU_MODEL_CASES[i]}
    bench.main(["--cases", "model", "--join", *map(str, parts)])
    (out,) = tmp_path.glob("model_shapes_*.json")
    records = json.loads(out.read_text())
    assert [(r["dtype"], r["rows"], r["row_len"]) for r in records[::4]] == bench.CPU_MODEL_CASES
    # parts of two runs, or a case measured twice, are not one run
    other = json.loads(parts[1].read_text())
    parts[1].write_text(json.dumps([{**r, "commit": "another"} for r in other]))
    with pytest.raises(SystemExit, match="2 runs"):
        bench.main(["--cases", "model", "--join", *map(str, parts)])
    with pytest.raises(SystemExit, match="more than one part"):
        bench.main(["--cases", "model", "--join", str(parts[0]), str(parts[0])])


@pytest.mark.parametrize("part", ["2/2", "1", "a/2"])
def test_a_part_is_one_of_n_and_writes_its_own_file(capsys, part):
    bench = _load("rms_norm_bench")
    with pytest.raises(SystemExit):
        bench.main(["--part", part, "--out", "x.json"])
    assert "--part takes I/N" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--part", "0/2"])
    assert "give --out" in capsys.readouterr().err
