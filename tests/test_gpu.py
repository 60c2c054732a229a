"""The CUDA kernels on sizes only a GPU test can afford (skipped without a GPU).

Every other test in this folder also runs on the GPU when one is present, so
the CUDA path gets the same dtype, shape, gradient and transformation checks
as the CPU path; these add what needs a real GPU.
"""

import os
import pathlib
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gpu_ops
import reference
from gpu_ops import float8
from gpu_ops.kernel_plans import H100, kernel_plan
from reference import assert_close

pytestmark = pytest.mark.gpu


def random_inputs(shape, dtype, seed):
    """Random x and dy of shape and a weight near 1, all of dtype."""
    kx, kw, kd = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(kx, shape, jnp.float32).astype(dtype)
    weight = (1 + 0.3 * jax.random.normal(kw, shape[-1:], jnp.float32)).astype(dtype)
    dy = jax.random.normal(kd, shape, jnp.float32).astype(dtype)
    return x, weight, dy


def check_random_op(shape, dtype, seed):
    """gpu_ops.rms_norm's forward and VJP against the float64 reference, on
    random_inputs."""
    reference.check_op(gpu_ops.rms_norm, *random_inputs(shape, dtype, seed))


@pytest.mark.ffi_lowering
def test_cuda_kernels_are_used():
    assert gpu_ops.CUDA_COMPILED
    x, w = jnp.ones((4, 8)), jnp.ones(8)
    hlo = jax.jit(gpu_ops.rms_norm).lower(x, w).compile().as_text()
    assert 'custom_call_target="gpu_ops_rms_norm_fwd"' in hlo


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
def test_more_rows_than_a_grid_dimension(dtype):
    rows = 70_001  # more than 65,535, the most blocks a grid's y and z dimensions hold
    x, weight, dy = random_inputs((rows, 96), dtype, seed=0)
    y, pullback = jax.vjp(gpu_ops.rms_norm, x, weight)
    assert_close(y, reference.forward(x, weight))
    dx, dweight = pullback(dy)
    expected_dx, expected_dweight = reference.vjp(x, weight, dy)
    assert_close(dx, expected_dx)
    # a sum over 70,001 rows: compare relative to its own size
    np.testing.assert_allclose(np.asarray(dweight, np.float64), expected_dweight,
                               rtol=2e-2, atol=2e-2 * np.abs(expected_dweight).max())


@pytest.mark.parametrize("row_length", [1, 3, 1000, 262_144])
def test_odd_and_long_rows(row_length):
    kx, kw, kd = jax.random.split(jax.random.key(1), 3)
    shape = (37, row_length)
    x = jax.random.normal(kx, shape, jnp.float32)
    weight = jax.random.normal(kw, (row_length,), jnp.float32)
    dy = jax.random.normal(kd, shape, jnp.float32)
    reference.check_op(gpu_ops.rms_norm, x, weight, dy)


def test_more_than_two_to_the_31_elements():
    rows, row_length = 2**23 + 1, 256  # 2**31 + 256 elements, 4 GiB in bfloat16
    eps = 1e-5
    x = jax.random.normal(jax.random.key(2), (rows, row_length), jnp.bfloat16)
    weight = jnp.linspace(0.5, 1.5, row_length, dtype=jnp.bfloat16)
    dy = jnp.flip(x, axis=1)
    y, pullback = jax.vjp(gpu_ops.rms_norm, x, weight)
    dx, dweight = pullback(dy)

    sample = np.array([0, 1, 2**22, 2**23 - 1, 2**23, rows - 1])  # both sides of 2**31
    x_s, dy_s = np.asarray(x[sample]), np.asarray(dy[sample])
    assert_close(y[sample], reference.forward(x_s, weight))
    assert_close(dx[sample], reference.vjp(x_s, weight, dy_s)[0])

    # dweight sums every row: compare with XLA's own float32 reduction on the GPU
    x32 = x.astype(jnp.float32)
    inv = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=1, keepdims=True) + eps)
    expected = jnp.sum(dy.astype(jnp.float32) * x32 * inv, axis=0)
    np.testing.assert_allclose(np.asarray(dweight, np.float32), np.asarray(expected),
                               rtol=2e-2, atol=2e-2 * float(jnp.abs(expected).max()))


# Shapes that together take every kernel path of the planner
# (gpu_ops/csrc/plan/rms_norm_plan.h) in each direction, on a GPU with clusters and
# without: rows of up to 256 values take a group of a warp's lanes each (of 262,147 such
# rows, the backward's blocks go through them several times); the backward of one row
# longer than a block's threads' vectors takes one cluster's column slices, the last
# slice part empty (a row of 13,600 values; on a GPU with clusters); up to 64 take a
# block a row beside blocks of columns (37 rows of 12,296 values: 2 vectors a thread,
# the last column block of one vector); 67 rows take a block each (fewer blocks of
# more rows would leave SMs idle), 4,099 two a block; 1,001 16-bit rows of 16,384
# (more than SMs) a 1024-thread block each; rows of 65,536 take a cluster (on
# Hopper; the general kernels elsewhere); and the general kernels
# (rms_norm_general.cu) take what the fast ones do not: rows longer than a cluster holds (the seed's 32 x 262,144, and 3 x 131,080, whose
# forward takes a cluster and backward the general kernel), rows not of whole 16-byte
# vectors, and float64.
PATH_CASES = [((262_147, 128), jnp.bfloat16), ((67, 200), jnp.float32),
              ((1, 13_600), jnp.bfloat16), ((8, 8_192), jnp.float32),
              ((37, 12_296), jnp.bfloat16),
              ((67, 1_024), jnp.bfloat16), ((4_099, 1_024), jnp.float32),
              ((1_001, 16_384), jnp.bfloat16), ((67, 65_536), jnp.bfloat16),
              ((32, 262_144), jnp.bfloat16), ((3, 131_080), jnp.bfloat16),
              ((67, 6), jnp.float32), ((67, 1_024), jnp.float64)]
WITHOUT_CLUSTERS = "GPU_OPS_PLAN_WITHOUT_CLUSTERS"
WITHOUT_PATHS = "GPU_OPS_PLAN_WITHOUT"


def clusters_planned():
    """Whether the handlers plan with clusters here (rms_norm_cuda.cu)."""
    return (float(jax.devices()[0].compute_capability) >= 9
            and os.environ.get(WITHOUT_CLUSTERS) != "1")


@pytest.mark.parametrize("shape,dtype", PATH_CASES)
def test_kernel_path(shape, dtype):
    check_random_op(shape, dtype, seed=3)


# Each dtype the fast kernels take, over row lengths from one vector to the
# seed's 262,144 (67 rows: no multiple of any team or segment count), and
# rows they do not take (part vectors, float64).
DTYPE_ROW_CASES = [
    (dtype, row_length)
    for dtype in (jnp.bfloat16, jnp.float16, jnp.float32)
    for row_length in (8, 1_024, 8_192, 16_384, 131_080, 262_144)
] + [(jnp.bfloat16, 1_000), (jnp.float32, 6), (jnp.float64, 1_024)]


@pytest.mark.parametrize("dtype,row_length", DTYPE_ROW_CASES)
def test_every_dtype_over_the_row_lengths(dtype, row_length):
    check_random_op((67, row_length), dtype, seed=3)


@pytest.mark.skipif(WITHOUT_PATHS in os.environ, reason="paths are left out")
def test_the_path_cases_take_every_path():
    taken = {direction: {kernel_plan(direction, shape, dtype)["path"]
                         for shape, dtype in PATH_CASES}
             for direction in ("forward", "backward")}
    forward = {"short_rows", "wide_rows", "block_rows", "row_teams", "general"}
    backward = {"short_rows", "column_slices", "rows_and_columns", "row_teams", "general"}
    if not clusters_planned():  # row teams of one block need more rows than a grid has blocks
        forward -= {"row_teams"}
        backward -= {"column_slices"}
    assert taken == {"forward": forward, "backward": backward}
    clusters = {kernel_plan(direction, shape, dtype).get("cluster", 1)
                for shape, dtype in PATH_CASES for direction in ("forward", "backward")}
    assert (max(clusters) > 1) == clusters_planned()


@pytest.mark.skipif(os.environ.get(WITHOUT_CLUSTERS) == "1" or WITHOUT_PATHS in os.environ,
                    reason="plans narrowed by the environment")
def test_the_described_h100_plans_as_this_hopper_gpu_does():
    # The model behind the CPU tests of the planner (described_gpu.h) against
    # CUDA's occupancy calculator, on the path cases: the same paths.
    device = jax.devices()[0]
    if float(device.compute_capability) != 9.0 or device.core_count != H100.sms:
        pytest.skip(f"not a GPU with the described H100's {H100.sms} SMs")
    for shape, dtype in PATH_CASES:
        for direction in ("forward", "backward"):
            here = kernel_plan(direction, shape, dtype)["path"]
            assert here == kernel_plan(direction, shape, dtype, H100)["path"], (shape, dtype)
    for shape, dtype, weight_dtype in RESIDUAL_CASES:  # the forward with a residual add
        here = kernel_plan("forward", shape, dtype, weight_dtype=weight_dtype, residual=True)
        described = kernel_plan("forward", shape, dtype, H100, weight_dtype=weight_dtype,
                                residual=True)
        assert here["path"] == described["path"], (shape, dtype)


def run_path_cases(environment, tests):
    """Runs `tests` of this file's path cases in a fresh process with
    `environment` added: XLA replays recorded calls without asking the
    handlers again, so a plan setting needs a process of its own. The outer
    run's PYTEST_ADDOPTS stay out: this process chooses its own tests. It
    allocates as it goes, since this process already holds most of the GPU's
    memory (XLA preallocates it)."""
    inherited = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    inherited["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
         "-k", tests], env={**inherited, **environment}, capture_output=True, text=True,
        cwd=pathlib.Path(__file__).parent)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout


@pytest.mark.runs_every_implementation
@pytest.mark.skipif(os.environ.get(WITHOUT_CLUSTERS) == "1", reason="already without clusters")
def test_the_paths_of_a_gpu_without_clusters():
    # The plans an A100 would get, run on this GPU.
    run_path_cases({WITHOUT_CLUSTERS: "1"}, "test_kernel_path or test_the_path_cases")


@pytest.mark.runs_every_implementation
@pytest.mark.skipif(WITHOUT_PATHS in os.environ, reason="already without those paths")
def test_the_paths_that_take_the_rows_of_those_left_out():
    # Without the paths for short rows, a decoding batch's backward and rows a
    # block holds, the
    # path cases take the others (row teams, of one block too, and the
    # general kernels), as the benchmarks do to measure what each
    # specialised path gains.
    run_path_cases({WITHOUT_PATHS: "short_rows,column_slices,rows_and_columns,wide_rows,"
                                   "block_rows"},
                   "test_kernel_path")


# A float32 weight of 16-bit x, as a model that keeps its weights in
# float32 has it (y, dy and the weight gradient float32, dx 16-bit): the
# paths for the rows of models take it as they take one dtype (short rows,
# in few rows and in rows the backward's blocks go through more than once;
# column slices, the last slice part empty; rows and columns;
# rows a block holds; 16-bit rows of 16,384 and their backward's clusters), and the general
# kernels longer rows.
FLOAT32_WEIGHT_CASES = [(5, 16, 128), (40_009, 64), (4_099, 256), (1, 13_600), (37, 12_296),
                        (67, 2_048), (4_099, 1_024), (1_001, 16_384), (67, 65_536)]


@pytest.mark.parametrize("shape", FLOAT32_WEIGHT_CASES, ids=str)
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_a_float32_weight(shape, dtype):
    x, weight, dy = random_inputs(shape, jnp.float32, seed=5)
    reference.check_op(gpu_ops.rms_norm, x.astype(dtype), weight, dy)


@pytest.mark.skipif(WITHOUT_PATHS in os.environ, reason="paths are left out")
def test_a_float32_weight_takes_the_paths_of_one_dtype():
    for direction in ("forward", "backward"):
        for shape in FLOAT32_WEIGHT_CASES[:-1]:
            mixed = kernel_plan(direction, shape, jnp.bfloat16, weight_dtype=jnp.float32)
            assert mixed["path"] == kernel_plan(direction, shape, jnp.bfloat16)["path"], shape
    assert kernel_plan("forward", (67, 65_536), jnp.bfloat16,
                       weight_dtype=jnp.float32)["path"] == "general"


@pytest.mark.parametrize("shape", [(4_099, 1_024), (1_001, 4_096)])
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.float32])
def test_forward_of_more_rows_than_the_gpu_holds_blocks_for(dtype, shape):
    # More rows than the GPU runs blocks of one row at once (a Hopper GPU's
    # 132 SMs hold 2,112 blocks of 128 threads, 528 of 512): blocks of one
    # or more rows (FastForwardKernel), for 16-bit rows two a block, the
    # last block holding one.
    check_random_op(shape, dtype, seed=4)


@pytest.mark.parametrize("shape", [(1_001, 16_384), (999, 16_376)])
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_forward_of_one_row_per_1024_thread_block(dtype, shape):
    # 16-bit rows of 16,384 take one 1024-thread block each, two to an SM,
    # the weight loaded vector by vector at the store (FastForwardKernel's
    # kWeightLate);
    # rows of 16,376 leave the last thread's vector out.
    check_random_op(shape, dtype, seed=5)


# Rows longer than the fast kernels hold, which the general kernels take:
# the seed's shape, rows a little over what a cluster holds in the backward
# (65,544 values), a last block of a row part empty (7 x 1,000,000), and
# float32.
LONG_ROW_CASES = [((32, 262_144), jnp.bfloat16), ((17, 65_544), jnp.float32),
                  ((7, 1_000_000), jnp.float16), ((33, 262_144), jnp.float32)]


@pytest.mark.parametrize("shape,dtype", LONG_ROW_CASES)
def test_rows_longer_than_the_fast_kernels_hold(shape, dtype):
    for direction in ("forward", "backward"):
        if direction == "backward" or shape[1] > 8 * 1024 * 16:
            assert kernel_plan(direction, shape, dtype)["path"] == "general"
    check_random_op(shape, dtype, seed=6)


# XLA records a run of at least 5 commands (its default minimum) into a
# command buffer, a CUDA graph, if every command may be recorded.
CALLS_FOR_A_GRAPH = 6
# float32 (rows, row length) that take a block per row, clusters (on
# Hopper) and the general kernels.
GRAPH_SHAPES = [(37, 4_096), (37, 65_536), (16, 262_144)]


def _vjps(xs, weight, dys):
    """The VJP of rms_norm for each (x, dy) pair: 2 * len(xs) custom calls."""
    results = []
    for x, dy in zip(xs, dys):
        y, pullback = jax.vjp(gpu_ops.rms_norm, x, weight)
        results.append((y, *pullback(dy)))
    return results


def test_xla_records_the_calls_into_cuda_graphs(tmp_path):
    # Which thunks XLA runs from a command buffer shows in its thunk dump, so
    # this compiles in a fresh process with XLA_FLAGS set.
    script = textwrap.dedent(f"""
        import jax, jax.numpy as jnp
        import test_gpu
        for rows, row_length in test_gpu.GRAPH_SHAPES:
            xs = jnp.ones(({CALLS_FOR_A_GRAPH}, rows, row_length))
            jax.jit(test_gpu._vjps).lower(xs, jnp.ones(row_length), xs).compile()
    """)
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={tmp_path}",
           "PYTHONPATH": os.pathsep.join([str(pathlib.Path(__file__).parent),
                                          os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", script], env=env, check=True)
    dumps = sorted(tmp_path.glob("*jit__vjps.thunk_sequence_after_thunk_passes.txt"))
    assert len(dumps) == len(GRAPH_SHAPES), sorted(p.name for p in tmp_path.iterdir())
    for dump in dumps:
        lines = dump.read_text().splitlines()
        assert lines[0].startswith("000: kCommandBuffer"), lines[:3]
        recorded = [line for line in lines[1:] if line[0].isspace() and "kCustomCall" in line]
        assert len(recorded) == 2 * CALLS_FOR_A_GRAPH, lines


@pytest.mark.parametrize("rows,row_length", GRAPH_SHAPES)
def test_calls_give_the_same_results_from_cuda_graphs(rows, row_length):
    def inputs(seed):
        kx, kw, kd = jax.random.split(jax.random.key(seed), 3)
        shape = (CALLS_FOR_A_GRAPH, rows, row_length)
        return (jax.random.normal(kx, shape, jnp.float32),
                1 + 0.3 * jax.random.normal(kw, (row_length,), jnp.float32),
                jax.random.normal(kd, shape, jnp.float32))

    compiled = jax.jit(_vjps).lower(*inputs(0)).compile()
    for seed in (0, 1):  # new buffers the second time: XLA records the graph again
        xs, weight, dys = inputs(seed)
        for (y, dx, dweight), x, dy in zip(compiled(xs, weight, dys), xs, dys):
            assert_close(y, reference.forward(x, weight))
            expected_dx, expected_dweight = reference.vjp(x, weight, dy)
            assert_close(dx, expected_dx)
            assert_close(dweight, expected_dweight)


def test_the_handlers_plan_without_reading_the_environment():
    # Only a test run reads GPU_OPS_PLAN_WITHOUT (conftest.py): a program
    # that sets it gets the full plans, and no error for a name that is no path.
    code = ("import jax.numpy as jnp, gpu_ops\n"
            "from gpu_ops import kernel_plans\n"
            "gpu_ops.rms_norm(jnp.ones((4, 1024)), jnp.ones(1024)).block_until_ready()\n"
            "print(kernel_plans.left_out())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, WITHOUT_PATHS: "fastest"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "((), False)"


# The forward with a residual add. Rows a block holds (FastForwardKernel
# with kResidual: 67 rows a block each, a transformer's 16,384 x 2,048,
# more rows than blocks run at once, 16-bit rows of 16,384 in 1024-thread
# blocks, a row of 5,000 whose last vectors are cut short); and the general kernel
# (rms_norm_general.cu) for a row shorter than a vector, the seed's long
# rows and float64; a float32 weight of bfloat16 x, rows a block holds.
RESIDUAL_CASES = [((67, 2_048), jnp.bfloat16, None), ((16_384, 2_048), jnp.bfloat16, None),
                  ((70_001, 96), jnp.float32, None), ((1_001, 16_384), jnp.bfloat16, None),
                  ((67, 5_000), jnp.float16, None), ((67, 3), jnp.float32, None),
                  ((32, 262_144), jnp.bfloat16, None), ((67, 1_024), jnp.float64, None),
                  ((67, 4_096), jnp.bfloat16, jnp.float32)]


@pytest.mark.parametrize("shape,dtype,weight_dtype", RESIDUAL_CASES, ids=str)
def test_residual_forward_over_the_row_lengths(shape, dtype, weight_dtype):
    def fused(x, weight, residual):
        return gpu_ops.rms_norm(x, weight, residual=residual)
    reference.check_residual_op(fused, *reference.residual_inputs(
        shape, dtype, weight_dtype=weight_dtype, seed=7))


@pytest.mark.skipif(WITHOUT_PATHS in os.environ, reason="paths are left out")
def test_the_residual_cases_take_every_residual_path():
    taken = {kernel_plan("forward", shape, dtype, residual=True,
                         weight_dtype=weight_dtype)["path"]
             for shape, dtype, weight_dtype in RESIDUAL_CASES}
    assert taken == {"block_rows", "general"}


# The forward quantised to float8 (rms_norm_fp8.cu): one group a row, many,
# a row a block sweeps several times, more rows than blocks run at once,
# float64 and mixed dtypes.
FP8_CASES = [((67, 128), jnp.bfloat16, None), ((67, 4_096), jnp.bfloat16, None),
             ((9, 262_144), jnp.float16, None), ((70_001, 256), jnp.float32, None),
             ((67, 1_024), jnp.float64, None), ((67, 2_048), jnp.bfloat16, jnp.float32)]


@pytest.mark.parametrize("shape,dtype,weight_dtype", FP8_CASES, ids=str)
def test_fp8_forward_over_the_row_lengths(shape, dtype, weight_dtype, implementation):
    # the kernel's values and scales against jnp's quantisation of the
    # reference y: the same but where rounding y differently crosses a
    # float8 midpoint (then one float8 step apart). The kernel quantises y
    # in float32; the HiJAX and Pallas routes quantise y as they return it,
    # in the weight's dtype, where their y may be a unit of its last place
    # from the reference's, and so may a group's largest magnitude.
    x, weight, _ = random_inputs(shape, dtype, seed=8)
    weight = weight.astype(weight_dtype or dtype)
    values, scales = gpu_ops.rms_norm_fp8(x, weight)
    y = jnp.asarray(reference.forward(x, weight), jnp.float32)
    scale_rtol = 1e-5
    if implementation != "ffi":
        y = y.astype(weight.dtype).astype(jnp.float32)
        scale_rtol = max(scale_rtol, float(jnp.finfo(weight.dtype).eps))
    expected_values, expected_scales = float8.quantize(y)
    np.testing.assert_allclose(scales, expected_scales, rtol=scale_rtol)
    got = np.asarray(values, np.float32).reshape(-1)
    want = np.asarray(expected_values, np.float32).reshape(-1)
    assert np.mean(got != want) < 1e-3
    np.testing.assert_allclose(got, want, rtol=2.0**-3, atol=2.0**-9)


@pytest.mark.parametrize("shape,dtype,weight_dtype", FP8_CASES, ids=str)
def test_fp8_forward_with_a_given_scale(shape, dtype, weight_dtype, implementation):
    # as above, against jnp's division of the reference y by the scale; and
    # the largest |y| of all rows. The scale saturates the largest values.
    x, weight, _ = random_inputs(shape, dtype, seed=10)
    weight = weight.astype(weight_dtype or dtype)
    y = jnp.asarray(reference.forward(x, weight), jnp.float32)
    if implementation != "ffi":
        y = y.astype(weight.dtype).astype(jnp.float32)
    scale = float(jnp.max(jnp.abs(y))) / 600
    values, amax = gpu_ops.rms_norm_fp8(x, weight, scale=scale)
    expected_values, expected_amax = float8.quantize_with(y, jnp.float32(scale))
    np.testing.assert_allclose(amax, expected_amax, rtol=1e-5)
    got = np.asarray(values, np.float32).reshape(-1)
    want = np.asarray(expected_values, np.float32).reshape(-1)
    assert np.abs(got).max() == 448
    assert np.mean(got != want) < 1e-3
    np.testing.assert_allclose(got, want, rtol=2.0**-3, atol=2.0**-9)


# The norm of a float8 input (rms_norm_from_fp8.cu): one group a row, many,
# a row a block sweeps several times, more rows than the backward has
# partial rows (so its blocks take several each), each weight dtype.
FROM_FP8_CASES = [((67, 128), jnp.bfloat16), ((67, 4_096), jnp.bfloat16),
                  ((9, 262_144), jnp.float16), ((70_001, 256), jnp.float32),
                  ((3_000, 1_024), jnp.bfloat16)]


@pytest.mark.parametrize("shape,weight_dtype", FROM_FP8_CASES, ids=str)
def test_fp8_input_over_the_row_lengths(shape, weight_dtype, implementation):
    x, weight, dy = random_inputs(shape, weight_dtype, seed=11)
    values, scales = float8.quantize(x)
    read_back = np.asarray(float8.dequantize(values, scales), np.float64)
    y, pullback = jax.vjp(gpu_ops.rms_norm_through_fp8_input, x, weight)
    assert_close(y, reference.forward(read_back, weight))
    if implementation == "ffi":  # the same kernel
        np.testing.assert_array_equal(y, gpu_ops.rms_norm_from_fp8(values, scales, weight))
    dx, dweight = pullback(dy)
    expected_dx, expected_dweight = reference.vjp(read_back, weight, dy)
    assert_close(dx, expected_dx)
    scale = np.abs(expected_dweight).max()
    np.testing.assert_allclose(np.asarray(dweight, np.float64), expected_dweight,
                               rtol=4e-2, atol=4e-3 * scale)


@pytest.mark.parametrize("shape", [(67, 4_096), (9, 262_144)], ids=str)
def test_fp8_forward_with_a_residual(shape):
    x, weight, _ = random_inputs(shape, jnp.bfloat16, seed=9)
    residual = jnp.flip(x, axis=-1)
    values, scales, total = gpu_ops.rms_norm_fp8(x, weight, residual=residual)
    np.testing.assert_array_equal(total, x + residual)
    alone = gpu_ops.rms_norm_fp8(total, weight)  # the same kernel's arithmetic
    np.testing.assert_array_equal(np.asarray(values).view(np.uint8),
                                  np.asarray(alone[0]).view(np.uint8))
    np.testing.assert_array_equal(scales, alone[1])
