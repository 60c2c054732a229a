"""The CUDA kernel planner, asked on any machine about described GPUs.

Each class of shapes gets the kernels meant for it on an H100 and on an
A100 (no clusters), and every plan launches a shape that covers its rows
within the GPU's limits. tests/test_gpu.py runs every path on a real GPU.
"""

import importlib.util
import math
import pathlib
import re

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import pytest

from gpu_ops.kernel_plans import (A100, H100, PATHS, GpuModel, kernel_plan, leave_out,
                                  left_out)


# shape, dtype: (forward, backward) path on the H100, then on the A100
CLASSES = [
    ((67, 1_024), jnp.bfloat16, ("block_rows", "row_teams"), ("block_rows", "row_teams")),
    ((16_384, 1_024), jnp.bfloat16, ("block_rows", "row_teams"),
     ("block_rows", "row_teams")),
    # rows a block does not hold: on an A100, which runs no clusters, the
    # general kernels
    ((16_384, 16_384), jnp.bfloat16, ("wide_rows", "row_teams"), ("wide_rows", "general")),
    ((16_384, 16_384), jnp.float32, ("block_rows", "row_teams"), ("block_rows", "general")),
    ((16_384, 65_536), jnp.bfloat16, ("row_teams", "row_teams"), ("general", "general")),
    # longer rows than a cluster of 8 holds, which no model has: the general
    # kernels
    ((1, 131_072), jnp.bfloat16, ("row_teams", "general"), ("general", "general")),
    ((32, 512 * 512), jnp.bfloat16, ("general", "general"), ("general", "general")),
    # decoding: the backward of one row over one cluster's column slices, of
    # up to 64 rows (and one without clusters) in a block a row beside blocks
    # of the weight gradient's columns
    ((8, 4_096), jnp.bfloat16, ("block_rows", "rows_and_columns"),
     ("block_rows", "rows_and_columns")),
    ((1, 16_384), jnp.bfloat16, ("block_rows", "column_slices"),
     ("block_rows", "rows_and_columns")),
    ((1, 8_192), jnp.bfloat16, ("block_rows", "rows_and_columns"),
     ("block_rows", "rows_and_columns")),
    ((64, 8_192), jnp.bfloat16, ("block_rows", "rows_and_columns"),
     ("block_rows", "rows_and_columns")),
    ((64, 16_384), jnp.bfloat16, ("block_rows", "rows_and_columns"),
     ("block_rows", "rows_and_columns")),
    ((132, 16_384), jnp.bfloat16, ("wide_rows", "row_teams"), ("wide_rows", "general")),
    ((65, 4_096), jnp.bfloat16, ("block_rows", "row_teams"), ("block_rows", "row_teams")),
    # QK-norm rows (head_dim 64 to 256), from decoding to training
    ((32, 128), jnp.bfloat16, ("short_rows", "short_rows"), ("short_rows", "short_rows")),
    ((262_144, 128), jnp.bfloat16, ("short_rows", "short_rows"),
     ("short_rows", "short_rows")),
    ((16_384, 256), jnp.float32, ("short_rows", "short_rows"), ("short_rows", "short_rows")),
    ((65_536, 64), jnp.float16, ("short_rows", "short_rows"), ("short_rows", "short_rows")),
    ((67, 1_024), jnp.float64, ("general", "general"), ("general", "general")),
    ((67, 6), jnp.float32, ("general", "general"), ("general", "general")),
]


@pytest.mark.parametrize("shape,dtype,on_h100,on_a100", CLASSES)
def test_each_shape_class_gets_its_kernels(shape, dtype, on_h100, on_a100):
    for gpu, paths in ((H100, on_h100), (A100, on_a100)):
        planned = tuple(kernel_plan(d, shape, dtype, gpu)["path"] for d in ("forward", "backward"))
        assert planned == paths, gpu.name


def test_the_plans_name_the_kernels_the_sources_define():
    """The kernels the plans name are the __global__ functions of
    gpu_ops/csrc, all of them (the float8 variants run the general ones), and
    they stay few: a path's kernel is a parameter of an existing one unless
    it must differ."""
    csrc = pathlib.Path(__file__).resolve().parents[1] / "gpu_ops" / "csrc"
    source = "\n".join(p.read_text() for p in sorted(csrc.rglob("*.cu*")))
    # (every kernel's name ends in Kernel, as the profiles' names do)
    defined = set(re.findall(r"__global__ [^;{]*?\b(\w+Kernel)\(", source))
    named = {name for shape, dtype, _, _ in CLASSES for gpu in (H100, A100)
             for d in ("forward", "backward")
             for name in kernel_plan(d, shape, dtype, gpu)["kernels"]}
    assert named == defined
    assert len(defined) <= 10


def test_long_rows_take_clusters_only_where_the_gpu_has_them():
    h100 = kernel_plan("forward", (16_384, 65_536), jnp.bfloat16, H100)
    assert h100["cluster"] == 4 and h100["threads"] == 1024
    backward = kernel_plan("backward", (16_384, 65_536), jnp.bfloat16, H100)
    assert backward["cluster"] == 8
    for direction in ("forward", "backward"):  # no cluster: no block holds such a row
        assert kernel_plan(direction, (16_384, 65_536), jnp.bfloat16, A100)["path"] == "general"


def test_rows_longer_than_a_cluster_holds_take_the_general_kernels():
    # A cluster of 8 blocks of 1024 threads holds 16 values a thread in the
    # forward, 8 in the backward.
    for direction, longest in (("forward", 8 * 1024 * 16), ("backward", 8 * 1024 * 8)):
        for dtype in (jnp.bfloat16, jnp.float32):
            plan = kernel_plan(direction, (16, longest), dtype, H100)
            assert (plan["path"], plan["cluster"]) == ("row_teams", 8)
            longer = kernel_plan(direction, (16, longest + 64), dtype, H100)
            assert longer["path"] == "general"
            assert ("row_teams", "a row is too long for a cluster of blocks") in longer["refused"]


VALUES_PER_VECTOR = {jnp.bfloat16: 8, jnp.float16: 8, jnp.float32: 4}


def check_plan_covers(plan, direction, rows, row_length, dtype, gpu):
    """The plan's launch takes every value of every row, within gpu's limits."""
    values = VALUES_PER_VECTOR[dtype]
    path, blocks, threads, cluster = (plan[k] for k in ("path", "blocks", "threads", "cluster"))
    assert 1 <= blocks < 2**31 and blocks % cluster == 0
    assert 32 <= threads <= 1024 and threads % 32 == 0
    assert plan["shared_bytes"] <= gpu.shared_bytes_per_block
    assert cluster == 1 or (gpu.clusters and cluster <= 8)
    vectors = plan.get("vectors_per_thread", 1)
    if path in ("wide_rows", "block_rows"):  # a block holds its rows
        assert cluster == 1 and threads * vectors * values >= row_length
        assert blocks * plan["rows_per_block"] >= rows
    elif path == "row_teams":
        assert plan["threads_per_row"] * vectors * values >= row_length
        assert plan["threads_per_row"] // cluster * plan["rows_at_once_per_block"] == threads
        if direction == "backward":  # each team its rows
            teams = blocks // cluster * plan["rows_at_once_per_block"]
            assert teams * plan["rows_per_team"] >= rows
    elif path == "short_rows":
        # a group of lanes of a warp a row, 8 values a lane
        lanes = plan["lanes_per_row"]
        assert lanes in (8, 16, 32) and threads == 256 and cluster == 1
        assert lanes * 8 >= row_length and row_length % 8 == 0
        if direction == "forward":  # each block its rows; the backward's go on
            # 4 rows a group of lanes, or 1 where 4 would leave SMs idle
            teams = threads // lanes
            four_idle = math.ceil(rows / (teams * 4)) < gpu.sms
            assert plan["rows_per_block"] == teams * (1 if four_idle else 4)
            assert blocks * plan["rows_per_block"] >= rows
        else:
            assert plan["rows_per_block_pass"] == threads // lanes * 2
            assert blocks <= math.ceil(rows / plan["rows_per_block_pass"])
    elif path == "rows_and_columns":
        # a block a row's dx, then blocks of 16 vector columns of every row
        assert direction == "backward" and cluster == 1
        assert plan["row_blocks"] == rows <= 64 and vectors <= 2
        assert threads * vectors * values >= row_length
        assert plan["column_blocks"] == math.ceil(row_length / values / 16)
        assert blocks == plan["row_blocks"] + plan["column_blocks"]
    else:
        # one cluster of 8 blocks, a thread a vector column of the one row
        assert path == "column_slices"
        assert direction == "backward" and gpu.clusters and rows == 1
        assert (cluster, blocks) == (8, 8) and threads <= 256
        assert cluster * threads * values >= row_length


#: The longest rows no plan leaves to the general kernels: on a GPU with
#: clusters, every row a model has (and up to 32,768 values); on one
#: without, rows of up to 4,096 values (a block, with its backward's ring of
#: float32 rows in 99 KiB of shared memory).
LONGEST_FAST_ROW = {"H100": 32_768, "A100": 4_096}


@pytest.mark.parametrize("gpu", [H100, A100], ids=lambda gpu: gpu.name)
def test_no_row_of_whole_vectors_a_model_has_falls_to_the_general_kernels(gpu):
    # A sweep, beside the random search below: the gaps between the paths'
    # ranges are narrow (an A100's float32 backward once fell through for
    # rows of 6,913 to 8,192 values only).
    for dtype, values in VALUES_PER_VECTOR.items():
        longest = LONGEST_FAST_ROW[gpu.name] // values
        for row_vectors in [*range(1, longest, 7), longest]:
            for rows in (1, 7, 300, 1_000, 1 << 20):
                for direction in ("forward", "backward"):
                    plan = kernel_plan(direction, (rows, row_vectors * values), dtype, gpu)
                    assert plan["path"] != "general", (direction, rows, row_vectors, dtype)


@hypothesis.example(rows=1_000, row_vectors=1_729, dtype=jnp.float32, gpu=A100,
                    direction="backward")
@hypothesis.given(rows=st.integers(1, 1 << 20), row_vectors=st.integers(1, 1 << 16),
                  dtype=st.sampled_from(list(VALUES_PER_VECTOR)),
                  gpu=st.sampled_from([H100, A100]),
                  direction=st.sampled_from(["forward", "backward"]))
def test_every_plan_covers_its_rows_within_the_gpus_limits(rows, row_vectors, dtype, gpu,
                                                           direction):
    row_length = row_vectors * VALUES_PER_VECTOR[dtype]
    plan = kernel_plan(direction, (rows, row_length), dtype, gpu)
    if row_length <= LONGEST_FAST_ROW[gpu.name]:
        assert plan["path"] != "general"  # whole 16-byte vectors of a fast dtype
    if plan["path"] != "general":
        check_plan_covers(plan, direction, rows, row_length, dtype, gpu)


@pytest.mark.parametrize("row_length", [1, 3, 5, 1_001])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_rows_of_part_vectors_take_the_general_kernels(row_length, direction):
    for dtype in (jnp.bfloat16, jnp.float32):
        assert kernel_plan(direction, (8, row_length), dtype, H100)["path"] == "general"


# shape, path, rows a block with few rows (fewer blocks of more rows would
# leave SMs of an H100 idle), then with many
FEW_AND_MANY = [((64, 8_192), (4_096, 8_192), "block_rows", 1, 2),
                ((256, 128), (65_536, 128), "short_rows", 16, 64)]


@pytest.mark.parametrize("few,many,path,rows_few,rows_many", FEW_AND_MANY)
def test_a_forward_of_few_rows_spreads_them_over_the_sms(few, many, path, rows_few,
                                                         rows_many):
    for shape, rows_per_block in ((few, rows_few), (many, rows_many)):
        plan = kernel_plan("forward", shape, jnp.bfloat16, H100)
        assert (plan["path"], plan["rows_per_block"]) == (path, rows_per_block), shape
        assert plan["blocks"] == -(-shape[0] // rows_per_block)


@pytest.mark.parametrize("gpu", [H100, A100], ids=lambda gpu: gpu.name)
def test_a_backward_of_many_rows_runs_in_one_wave_of_blocks(gpu):
    # 1,024 and 65,536 rows of 8,192 bfloat16 values: blocks of 1,024 threads,
    # one an SM
    for rows in (1_024, 65_536):
        plan = kernel_plan("backward", (rows, 8_192), jnp.bfloat16, gpu)
        assert (plan["path"], plan["threads"]) == ("row_teams", 1_024)
        assert plan["blocks"] == gpu.sms
        assert plan["blocks"] * plan["rows_per_team"] >= rows


def test_bad_questions_get_clear_errors():
    with pytest.raises(ValueError, match="direction"):
        kernel_plan("sideways", (8, 1_024), jnp.float32, H100)
    with pytest.raises(TypeError, match="GpuModel"):
        kernel_plan("forward", (8, 1_024), jnp.float32, "H100")
    with pytest.raises(ValueError, match="shape"):
        kernel_plan("forward", (0, 1_024), jnp.float32, H100)
    for shape in (1_024, (8, 1_024.0), (8, True), "8, 1024"):
        with pytest.raises(TypeError, match="shape must be a tuple or list of integers"):
            kernel_plan("forward", shape, jnp.float32, H100)
    # The dtypes rms_norm takes, no others (a plan for int8 would be one no
    # call could ask for).
    for dtype in (jnp.int8, "float8_e4m3fn", None, "no such dtype"):
        with pytest.raises(TypeError, match="kernel_plan: dtype must be float16"):
            kernel_plan("forward", (8, 1_024), dtype, H100)
    with pytest.raises(TypeError, match="kernel_plan: weight_dtype must be float16"):
        kernel_plan("forward", (8, 1_024), jnp.float32, H100, weight_dtype=jnp.int32)
    if jax.default_backend() != "gpu":
        with pytest.raises(ValueError, match="GpuModel"):
            kernel_plan("forward", (8, 1_024), jnp.float32)


@pytest.mark.parametrize("shape,dtype,on_h100,on_a100", CLASSES)
def test_leaving_a_path_out_gives_another_that_takes_the_rows(shape, dtype, on_h100,
                                                              on_a100):
    for direction, path in zip(("forward", "backward"), on_h100):
        if path == "general":
            continue
        plan = kernel_plan(direction, shape, dtype, H100, without=[path])
        assert plan["path"] != path
        if plan["path"] != "general":  # which takes every input
            check_plan_covers(plan, direction, shape[0], shape[1], dtype, H100)
    # with every fast path left out, the general kernels take everything
    everything = kernel_plan("forward", shape, dtype, H100, without=PATHS[:-1])
    assert everything["path"] == "general"


def test_only_paths_can_be_left_out():
    with pytest.raises(ValueError, match="kernel paths"):
        kernel_plan("forward", (8, 1_024), jnp.float32, H100, without=["fastest"])
    with pytest.raises(ValueError, match="kernel paths"):
        kernel_plan("forward", (8, 1_024), jnp.float32, H100, without=["general"])
    with pytest.raises(TypeError, match="sequence of path names"):
        kernel_plan("forward", (8, 1_024), jnp.float32, H100, without="row_teams")


def test_the_handlers_leave_out_what_a_benchmark_asks_and_only_paths():
    # A process-wide setting, which the CUDA handlers read at each call (the
    # benchmarks measure each path on one GPU with it).
    assert left_out() == ((), False)
    try:
        leave_out(("row_teams", "wide_rows"), clusters=True)
        assert left_out() == (("wide_rows", "row_teams"), True)  # in PATHS' order
        with pytest.raises(ValueError, match="'fastest' names something other than kernel"):
            leave_out(["fastest"])
        assert left_out() == (("wide_rows", "row_teams"), True)  # a refused call changes nothing
        with pytest.raises(TypeError, match="sequence of path names"):
            leave_out("row_teams")
    finally:
        leave_out()
    assert left_out() == ((), False)


def _load(path):
    """The module at `path`, relative to the repository root."""
    path = pathlib.Path(__file__).parents[1] / path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Rows of the model-shape benchmark: decoding to training, QK-norm to the
# widest hidden size.
MODEL_ROWS = [(1, 4_096), (8, 8_192), (8, 16_384), (64, 4_096), (1_024, 5_120),
              (8_192, 16_384), (65_536, 2_048), (32, 128), (65_536, 128)]


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_a_float32_weight_takes_the_paths_of_the_rows_of_models(direction):
    # A float32 weight of 16-bit x (y, dy and the weight gradient float32):
    # the paths for the rows of models take it as they take one dtype; those
    # for longer rows do not, and leave them to the general kernels.
    for x_dtype in (jnp.bfloat16, jnp.float16):
        for shape in MODEL_ROWS:
            mixed = kernel_plan(direction, shape, x_dtype, H100, weight_dtype=jnp.float32)
            assert mixed["path"] == kernel_plan(direction, shape, x_dtype, H100)["path"], shape
            assert mixed["path"] != "general", shape
        # the forward's row teams (rows a block does not hold) take one dtype
        long_rows = kernel_plan("forward", (32, 65_536), x_dtype, H100,
                                weight_dtype=jnp.float32)
        assert long_rows["path"] == "general"
        assert kernel_plan("forward", (32, 65_536), x_dtype, H100)["path"] == "row_teams"
        assert ("row_teams", "x is 16-bit and the weight float32, which its kernels do not "
                "take") in long_rows["refused"]
    # other pairs: the general kernels
    for x_dtype, w_dtype in ((jnp.float32, jnp.bfloat16), (jnp.bfloat16, jnp.float16)):
        plan = kernel_plan(direction, (8, 128), x_dtype, H100, weight_dtype=w_dtype)
        assert plan["path"] == "general"


def test_a_float32_weight_takes_more_ring_memory_in_the_backward():
    # dy's float32 values beside each 16-byte vector of 16-bit x are two
    # vectors: three 16-byte slots a vector of x where one dtype takes two.
    same = kernel_plan("backward", (8_192, 4_096), jnp.bfloat16, H100)
    mixed = kernel_plan("backward", (8_192, 4_096), jnp.bfloat16, H100,
                        weight_dtype=jnp.float32)
    assert same["path"] == mixed["path"] == "row_teams"
    assert mixed["shared_bytes"] * 2 == same["shared_bytes"] * 3


# The forward with a residual add: rows a block holds (half as many rows a
# block as without it, for the residual's loads, and 16-bit rows of 16,384
# too); the general kernels take the rest, such as rows a cluster holds.
RESIDUAL_CLASSES = [((67, 1_024), jnp.bfloat16, "block_rows"),
                    ((16_384, 2_048), jnp.bfloat16, "block_rows"),
                    ((16_384, 1_024), jnp.float32, "block_rows"),
                    ((16_384, 512), jnp.bfloat16, "block_rows"),
                    ((16_384, 16_384), jnp.bfloat16, "block_rows"),
                    ((67, 65_536), jnp.bfloat16, "general"),
                    ((67, 1_024), jnp.float64, "general")]


@pytest.mark.parametrize("shape,dtype,path", RESIDUAL_CLASSES)
def test_the_residual_forward_takes_rows_a_block_holds(shape, dtype, path):
    for gpu in (H100, A100):
        plan = kernel_plan("forward", shape, dtype, gpu, residual=True)
        assert plan["path"] == path, gpu.name
        if path == "block_rows":
            assert plan["rows_per_block"] == max(1, 2 // plan["vectors_per_thread"])
        if path != "general":
            check_plan_covers(plan, "forward", *shape, dtype, gpu)


def test_residual_plans_are_of_the_forward():
    with pytest.raises(ValueError, match="residual applies to the forward"):
        kernel_plan("backward", (8, 1_024), jnp.float32, H100, residual=True)


@pytest.mark.parametrize("gpu", [H100, A100], ids=lambda gpu: gpu.name)
def test_every_residual_plan_covers_its_rows_within_the_gpus_limits(gpu):
    for dtype, values in VALUES_PER_VECTOR.items():
        for row_vectors in [*range(1, 1 << 12, 5), 1 << 12, 1 << 14]:
            for rows in (1, 300, 1 << 20):
                plan = kernel_plan("forward", (rows, row_vectors * values), dtype, gpu,
                                   residual=True)
                assert plan["path"] in ("block_rows", "general")
                if plan["path"] != "general":
                    check_plan_covers(plan, "forward", rows, row_vectors * values, dtype, gpu)


def test_a_plan_says_why_it_passed_over_the_paths_before_it():
    # "Which kernel runs for bfloat16 8,192 x 4,096 on an H100, and why?"
    plan = kernel_plan("forward", (8192, 4096), "bfloat16", H100)
    assert plan["path"] == "block_rows" and plan["kernels"] == ["FastForwardKernel"]
    # 4,096 blocks of 256 threads, each thread 2 vectors of 16 bytes of 2 rows
    assert {k: plan[k] for k in ("blocks", "threads", "cluster", "rows_per_block",
                                 "vectors_per_thread")} == {
        "blocks": 4096, "threads": 256, "cluster": 1, "rows_per_block": 2,
        "vectors_per_thread": 2}
    assert plan["refused"] == [
        ("short_rows", "rows of more than 256 values"),
        ("wide_rows", "a row takes at most 512 threads")]
    left_out = kernel_plan("forward", (8192, 4096), "bfloat16", H100, without=("wide_rows",))
    assert left_out["path"] == "block_rows"
    assert left_out["refused"][1] == ("wide_rows", "left out of the plans")


# What a plan gives each thread, block or cluster, by path and direction,
# beside the launch every fast path has.
LAUNCH = {"blocks", "threads", "cluster", "shared_bytes"}
PATH_FIELDS = {
    "short_rows": ({"lanes_per_row", "rows_per_block"}, {"lanes_per_row", "rows_per_block_pass"}),
    "column_slices": (None, set()),
    "rows_and_columns": (None, {"row_blocks", "column_blocks", "vectors_per_thread"}),
    "wide_rows": ({"rows_per_block", "vectors_per_thread"}, None),
    "block_rows": ({"rows_per_block", "vectors_per_thread"}, None),
    "row_teams": ({"threads_per_row", "rows_at_once_per_block", "vectors_per_thread"},
                  {"threads_per_row", "rows_at_once_per_block", "vectors_per_thread",
                   "rows_per_team"}),
}


def test_a_plan_has_the_fields_of_its_path_and_no_others():
    bench = _load("benchmarks/rms_norm_bench.py")
    seen = set()
    for dtype, rows, row_length in [*bench.PATH_CASES, ("float32", 8, 6)]:
        for index, direction in enumerate(("forward", "backward")):
            plan = kernel_plan(direction, (rows, row_length), dtype, H100)
            common = {"path", "kernels", "refused"}
            if plan["path"] == "general":
                assert set(plan) == common
            else:
                assert set(plan) == common | LAUNCH | PATH_FIELDS[plan["path"]][index]
            assert plan["kernels"] and all(k.endswith("Kernel") for k in plan["kernels"])
            seen.add(plan["path"])
    assert seen == set(PATHS)


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_the_general_kernels_come_with_why_no_fast_one_took_the_rows(direction):
    plan = kernel_plan(direction, (8, 6), "float32", H100)  # not whole 16-byte vectors
    assert plan["path"] == "general"
    refused = [path for path, _ in plan["refused"]]
    tried = {"forward": set(PATHS) - {"column_slices", "rows_and_columns", "general"},
             "backward": {"short_rows", "column_slices", "rows_and_columns", "row_teams"}}
    assert set(refused) == tried[direction]
    assert all("16-byte vectors" in why for _, why in plan["refused"])


@pytest.mark.parametrize("gpu", [H100, A100], ids=lambda g: g.name)
@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("shape", [(262144, 128), (1, 4096), (512, 1024), (16384, 16384),
                                   (8, 8192), (64, 65536)])
def test_without_its_path_a_plan_refuses_the_same_paths_then_that_one(gpu, direction, shape):
    plan = kernel_plan(direction, shape, "bfloat16", gpu)
    refused = plan["refused"]
    if plan["path"] == "general":
        pytest.skip("the general kernels, which are never left out")
    again = kernel_plan(direction, shape, "bfloat16", gpu, without=(plan["path"],))
    assert again["refused"][:len(refused)] == refused
    assert again["refused"][len(refused)] == (plan["path"], "left out of the plans")
