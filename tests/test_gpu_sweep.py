"""The GPU sweep: every kernel path the planner can choose, at its edges,
against the float64 reference (tests/sweep_cases.py generates the cases).

On a GPU each case runs the CUDA kernels its plan names; without one, the
generator itself is tested on described GPUs: its cases take every path
that a dense sample of the planner's questions finds, and stand on both
sides of each path's edges.
"""

import itertools
import os
import random

import jax
import pytest

import sweep_cases
from gpu_ops import ffi_targets, kernel_plans
from gpu_ops.kernel_plans import A100, H100, PATHS

ON_GPU = ffi_targets.CUDA_COMPILED and jax.default_backend() == "gpu"


def gpu_cases():
    """On a GPU, the cases of its own plans, as the environment narrows them
    (conftest.py); where the plans are narrowed (a second run, without
    clusters), only those a fast path takes, as the general kernels' calls
    do not depend on the plans. Elsewhere none: the generator's tests below
    run instead."""
    if not ON_GPU:
        return []
    narrowed = kernel_plans.left_out() != ((), False)
    return [case for case in sweep_cases.cases()
            if not (narrowed and case.forward.startswith("general")
                    and case.backward.startswith(("general", "")))]


GPU_CASES = gpu_cases()


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda case: case.id)
def test_the_kernels_give_the_reference_answer(case):
    sweep_cases.run(case, seed=hash(case.id) % 2**16)


@pytest.mark.gpu
def test_the_sweep_has_cases_on_this_gpu():
    assert len(GPU_CASES) > 100


DESCRIBED = {"H100": H100, "A100": A100}


@pytest.fixture(scope="module", params=DESCRIBED)
def described(request):
    gpu = DESCRIBED[request.param]
    return gpu, sweep_cases.cases(gpu)


def _sampled_paths(kind, x_dtype, weight_dtype, gpu, samples=3000):
    """The (forward, backward) paths of random shapes of a kind and dtype
    pair: rows and lengths drawn log-uniformly, lengths of whole vectors
    mostly."""
    paths = sweep_cases._paths(kind, x_dtype, weight_dtype, gpu)
    step = sweep_cases.vector_values(x_dtype)
    draw = random.Random(f"{kind}{x_dtype}{weight_dtype}")
    seen = set()
    for _ in range(samples):
        rows = int(2 ** draw.uniform(0, 23))
        length = int(2 ** draw.uniform(0, 18))
        if draw.random() < 0.9:
            length = max(step, length // step * step)
        seen.add(paths(rows, length))
    return seen


@pytest.mark.parametrize("kind", ["norm", "residual"])
def test_the_cases_take_every_path_a_sample_of_shapes_finds(described, kind):
    gpu, all_cases = described
    for x_dtype, weight_dtype in sweep_cases.dtype_pairs(kind):
        swept = {(c.forward, c.backward) for c in all_cases
                 if (c.kind, c.x_dtype, c.weight_dtype) == (kind, x_dtype, weight_dtype)}
        missed = _sampled_paths(kind, x_dtype, weight_dtype, gpu) - swept
        assert not missed, (x_dtype, weight_dtype, missed)


def test_every_path_is_swept_on_a_gpu_with_clusters(described):
    gpu, all_cases = described
    taken = {case.forward for case in all_cases} | {case.backward for case in all_cases}
    expected = set(PATHS) - ({"column_slices"} if not gpu.clusters else set())
    assert expected <= taken
    assert {"general_float8_out", "general_float8_in"} <= taken


def _edges(all_cases, kind, x_dtype, weight_dtype):
    """{row_length: {rows: paths}} of a kind and dtype pair's cases."""
    by_length = {}
    for c in all_cases:
        if (c.kind, c.x_dtype, c.weight_dtype) == (kind, x_dtype, weight_dtype):
            by_length.setdefault(c.row_length, {})[c.rows] = (c.forward, c.backward)
    return by_length


def test_a_block_shorter_than_a_column_blocks_values_is_swept(described):
    # The rows-and-columns backward once left half the weight gradient of
    # float32 rows of 9 to 31 vectors unwritten: its 32-thread blocks, one
    # a row, have fewer threads than a column block of 16 vectors has values.
    # The longest row of 32-thread blocks is a case, at 1, 2 and 64 rows.
    _, all_cases = described
    edges = _edges(all_cases, "norm", "float32", "float32")
    assert {1, 2, 64} <= {rows for rows, paths in edges[124].items()
                          if paths[1] == "rows_and_columns"}


def test_each_path_is_swept_at_its_most_rows_and_one_more(described):
    # the rows-and-columns backward takes up to 64 rows, at every length it
    # takes, and the 65th goes to another path
    _, all_cases = described
    for x_dtype, weight_dtype in [("float32", "float32"), ("bfloat16", "float32")]:
        edges = _edges(all_cases, "norm", x_dtype, weight_dtype)
        lengths = [length for length, rows in edges.items()
                   if rows.get(64, ("", ""))[1] == "rows_and_columns"]
        assert lengths
        assert all(edges[length][65][1] != "rows_and_columns" for length in lengths)


def _run_edges(scan, start):
    """{value: (first, last)} of a scan of values from point `start` on,
    and the scan's last point."""
    found = {}
    for p, value in enumerate(scan, start=start):
        found[value] = (found.get(value, (p, p))[0], p)
    return found, start + len(scan) - 1


@pytest.mark.parametrize("x_dtype,weight_dtype", [("bfloat16", "bfloat16"),
                                                  ("float32", "float32"),
                                                  ("bfloat16", "float32")])
def test_where_each_path_starts_and_stops_is_a_case(described, x_dtype, weight_dtype):
    # Against a scan of every row count up to 400 (or the most a case has)
    # at each swept length, and of every length up to 2,048 vectors at the
    # row counts the generator probes lengths at: the first and last of each
    # path, and the points just outside, are cases (where the scan ends
    # inside a run, its end is not that run's).
    gpu, all_cases = described
    edges = _edges(all_cases, "norm", x_dtype, weight_dtype)
    paths = sweep_cases._paths("norm", x_dtype, weight_dtype, gpu)
    for length, rows in edges.items():
        if length > 16_384:
            continue
        most_rows = max(2, sweep_cases.MOST_VALUES // length)  # the generator's too
        runs, end = _run_edges([paths(r, length) for r in range(1, min(400, most_rows) + 1)], 1)
        for value, (first, last) in runs.items():
            assert {max(1, first - 1), first} <= set(rows), (length, value, first)
            if last < end:
                assert {last, last + 1} <= set(rows), (length, value, last)
    step = sweep_cases.vector_values(x_dtype)
    for rows in (1, 2, 64, 65):
        runs, end = _run_edges([paths(rows, k * step) for k in range(1, 2_049)], 1)
        for value, (first, last) in runs.items():
            assert {max(1, first - 1) * step, first * step} <= set(edges), (rows, value)
            if last < end:
                assert {last * step, (last + 1) * step} <= set(edges), (rows, value)


def test_rows_of_part_vectors_and_a_blocks_worth_are_swept(described):
    _, all_cases = described
    for x_dtype in ("float16", "bfloat16", "float32"):
        step = sweep_cases.vector_values(x_dtype)
        lengths = set(_edges(all_cases, "norm", x_dtype, x_dtype))
        assert {step - 1, step, step + 1} <= lengths
        assert {1024 * step - 1, 1024 * step, 1024 * step + 1, 1025 * step} <= lengths


def test_each_length_is_swept_at_one_and_two_rows(described):
    _, all_cases = described
    for (kind, x_dtype, weight_dtype), group in itertools.groupby(
            sorted(all_cases, key=lambda c: (c.kind, c.x_dtype, c.weight_dtype)),
            key=lambda c: (c.kind, c.x_dtype, c.weight_dtype)):
        for length, rows in _edges(list(group), kind, x_dtype, weight_dtype).items():
            assert {1, 2} <= set(rows), (kind, x_dtype, weight_dtype, length)


def test_the_subset_takes_every_path_once(described):
    _, all_cases = described
    subset = sweep_cases.subset(all_cases)
    assert ({(c.kind, c.x_dtype, c.weight_dtype, c.forward, c.backward) for c in subset}
            == {(c.kind, c.x_dtype, c.weight_dtype, c.forward, c.backward) for c in all_cases})
    assert len(subset) < len(all_cases) / 4


@pytest.mark.skipif(os.environ.get("GPU_OPS_SWEEP_SIZE") is None, reason="sizes on request")
def test_print_the_sweep_sizes(described):
    gpu, all_cases = described
    print(gpu.name, len(all_cases), len(sweep_cases.subset(all_cases)))
