"""The GPU sweep's cases, generated from the kernel planner, and their check.

Every kernel path the planner can choose is taken at its edges: for each
kind of call (the norm, with a residual add, with its output quantised to
float8, of a float8 input) and each dtype pair, the sweep asks
:func:`gpu_ops.kernel_plans.kernel_plan` where each path starts and stops,
along the row length and along the number of rows, and takes the shapes on
both sides: so a path is swept at the fewest and the most rows, and the
shortest and the longest rows, it takes, and at one beyond each, the moment the planner can return it, with no list
of shapes to keep up by hand. Rows of one value short of and one past a
16-byte vector, 1 and 2 rows, and a block's worth of vectors and one more
are added to every dtype pair's cases.

:func:`cases` generates them for the current GPU (``gpu=None``, which needs
a CUDA build on a GPU) or for a described one (a
:class:`~gpu_ops.kernel_plans.GpuModel`, on any machine: how the tests check
the generator itself). :func:`run` computes a case's results with gpu_ops
and compares y, dx, dw, float8 values and scales with the float64 reference.
tests/test_gpu_sweep.py runs every case on a GPU; tools/sanitizer_workload.py
runs :func:`subset` under compute-sanitizer.
"""

import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

import gpu_ops
import reference
from gpu_ops import float8
from gpu_ops.kernel_plans import kernel_plan

# The dtypes the kernels take; x's and the weight's may differ.
DTYPES = ("float16", "bfloat16", "float32", "float64")
# The kinds of call: the norm (forward and backward), the forward with a
# residual add, the forward quantised to float8 (per group and with a
# given scale, each with and without a residual add), and the norm of a
# float8 input (forward and backward).
KINDS = ("norm", "residual", "float8_out", "float8_in")
# Each case's x holds at most this many values, so that its float64
# reference stays quick; row counts stop there too.
MOST_VALUES = 1 << 21
# Row lengths probed up to the seed tutorial's 262,144 values and one more:
# longer than any fast path takes, so that where each stops is found.
LONGEST_PROBED = (1 << 18) + 1
# Every row length up to this many vectors is probed (rows of up to 256
# values, 64 float32 vectors, alternate between paths: a short-rows group
# of 8 values takes every other float32 vector), and every row count up to
# DENSE_ROWS.
DENSE_LENGTHS = 128
DENSE_ROWS = 300
# A block's most threads, each a 16-byte vector: a row of a block's worth.
BLOCK_THREADS = 1024


@dataclasses.dataclass(frozen=True)
class Case:
    kind: str
    x_dtype: str
    weight_dtype: str
    rows: int
    row_length: int
    forward: str  # the forward's path
    backward: str  # the backward's path ("" where the kind has no backward kernel)

    @property
    def id(self):
        paths = "/".join(filter(None, (self.forward, self.backward)))
        return (f"{self.kind}-{self.x_dtype}-{self.weight_dtype}-"
                f"{self.rows}x{self.row_length}-{paths}")

    @property
    def values(self):
        return self.rows * self.row_length


def vector_values(dtype):
    """Values of `dtype` in a 16-byte vector, the fast kernels' load."""
    return 16 // jnp.dtype(dtype).itemsize


def _launches(kind, x_dtype, weight_dtype, gpu):
    """launches(rows, row_length): ((forward path, backward path), (each
    one's block shape)) of a call of `kind`. A block shape is the blocks of
    its cluster, the 16-byte vectors of its threads and its threads to the
    next power of two: a kernel may hold for one and break for another, as
    the rows-and-columns backward did for blocks of fewer threads than a
    column block's values. The float8 kinds have one kernel for every shape
    (the general kernels with a float8 output or input): their paths are
    named so, and their blocks the general kernels' own."""
    if kind == "float8_out":
        return lambda rows, row_length: (("general_float8_out", ""), ())
    if kind == "float8_in":
        return lambda rows, row_length: (("general_float8_in", "general_float8_in"), ())

    @functools.cache
    def launches(rows, row_length):
        plans = [kernel_plan(direction, (rows, row_length), x_dtype, gpu,
                             weight_dtype=weight_dtype, **options)
                 for direction, options in (("forward", {"residual": kind == "residual"}),
                                            ("backward", {}))]
        blocks = tuple((plan.get("cluster"), plan.get("vectors_per_thread"),
                        (plan.get("threads", 0) - 1).bit_length()) for plan in plans)
        return tuple(plan["path"] for plan in plans), blocks
    return launches


def _paths(kind, x_dtype, weight_dtype, gpu, launches=None):
    """paths(rows, row_length): the (forward, backward) paths of a call of
    `kind` (from `launches`, _launches' function, where given)."""
    launches = launches or _launches(kind, x_dtype, weight_dtype, gpu)
    return lambda rows, row_length: launches(rows, row_length)[0]


def _probes(low, high, dense):
    """Every point from low to `dense`, then points about 12% apart to high."""
    points = set(range(low, min(high, dense) + 1))
    point = dense
    while point < high:
        points.add(point)
        point = max(point + 1, int(point * 1.125))
    points.add(high)
    return sorted(points)


def edges(value_at, low, high, dense):
    """The edges of the runs of value_at(p) over p in [low, high]: for each
    value, the first and the last point that has it, and the points just
    before and after those. Every point up to `dense` is probed, then points
    a few percent apart, and between two probes that differ a bisection
    finds where the value changes (a run narrower than the probes' spacing
    beyond `dense` may be missed)."""
    known = {}

    def at(p):
        if p not in known:
            known[p] = value_at(p)
        return known[p]

    def bisect(a, b):
        if b > a + 1:
            middle = (a + b) // 2
            if at(middle) != at(a):
                bisect(a, middle)
            if at(middle) != at(b):
                bisect(middle, b)

    probes = _probes(low, high, dense)
    for a, b in itertools.pairwise(probes):
        if at(a) != at(b):
            bisect(a, b)
    first, last = {}, {}
    for p in sorted(known):
        first.setdefault(known[p], p)
        last[known[p]] = p
    points = set()
    for value in first:
        points.update((first[value] - 1, first[value], last[value], last[value] + 1))
    return sorted(p for p in points if low <= p <= high)


def _row_lengths(kind, x_dtype, launches, gpu):
    """The row lengths of a kind and dtype pair's cases: where each of its
    paths, and each block shape of a path, starts and stops along the length
    (at a few row counts: one, two, the most rows and one more that the
    paths of few rows take, as many as the GPU's SMs and past four times
    that); one vector, a block's worth of vectors and one more, with one
    value short of and one past each of those; for the float8 kinds, whole
    groups of 128 at the general kernels' edges."""
    step = float8.GROUP if kind.startswith("float8") else vector_values(x_dtype)
    lengths = {step, BLOCK_THREADS * step, (BLOCK_THREADS + 1) * step}
    if not kind.startswith("float8"):
        sms = (gpu.sms if gpu is not None else jax.devices()[0].core_count)
        for rows in (1, 2, 64, 65, sms, 4 * sms + 1):
            lengths.update(k * step for k in edges(lambda k: launches(rows, k * step), 1,
                                                   LONGEST_PROBED // step, DENSE_LENGTHS))
    else:
        # the general kernels' edges: a chunk of 4 values a thread, 512
        # threads a block, as rows of whole groups
        lengths.update((4 * 512, 4 * 512 + step, LONGEST_PROBED - 1))
    whole = sorted(length for length in lengths if length < LONGEST_PROBED)
    if kind.startswith("float8"):  # whole groups only
        return whole
    parts = {length + d for length in (step, BLOCK_THREADS * step) for d in (-1, 1)}
    return sorted(set(whole) | {p for p in parts if p > 0})


def kind_cases(kind, x_dtype, weight_dtype, gpu=None):
    """The cases of one kind of call and dtype pair."""
    launches = _launches(kind, x_dtype, weight_dtype, gpu)
    paths = _paths(kind, x_dtype, weight_dtype, gpu, launches)
    found = {}
    for row_length in _row_lengths(kind, x_dtype, launches, gpu):
        most_rows = max(2, MOST_VALUES // row_length)
        rows = {1, 2, most_rows}
        rows.update(edges(lambda r: paths(r, row_length), 1, most_rows, DENSE_ROWS))
        for r in sorted(rows):
            case = Case(kind, x_dtype, weight_dtype, r, row_length, *paths(r, row_length))
            found[case.id] = case
    return list(found.values())


def dtype_pairs(kind):
    """(x's dtype, the weight's) for a kind: every pair, as the general
    kernels take every pair; a float8 input's x is float32 (what is
    quantised), and only its weight's dtype varies."""
    if kind == "float8_in":
        return [("float32", w) for w in DTYPES[:3]]
    return list(itertools.product(DTYPES, DTYPES))


def cases(gpu=None):
    """Every case of the sweep, for the current GPU's plans (gpu=None) or a
    described GPU's."""
    return [case for kind in KINDS for x_dtype, weight_dtype in dtype_pairs(kind)
            for case in kind_cases(kind, x_dtype, weight_dtype, gpu)]


def subset(all_cases, by_dtype=True):
    """The smallest case of each kind, pair of paths and (with by_dtype)
    dtype pair: every path once, for compute-sanitizer, under which each
    call is slow."""
    smallest = {}
    for case in sorted(all_cases, key=lambda c: c.values):
        dtypes = (case.x_dtype, case.weight_dtype) if by_dtype else ()
        smallest.setdefault((case.kind, case.forward, case.backward, *dtypes), case)
    return list(smallest.values())


def _inputs(case, seed):
    kx, kw, kd, kr = jax.random.split(jax.random.key(seed), 4)
    shape = (case.rows, case.row_length)
    x = jax.random.normal(kx, shape, jnp.float32).astype(case.x_dtype)
    weight = (1 + 0.3 * jax.random.normal(kw, shape[-1:], jnp.float32)).astype(
        case.weight_dtype)
    dy = jax.random.normal(kd, shape, jnp.float32)
    residual = jax.random.normal(kr, shape, jnp.float32).astype(case.x_dtype)
    return x, weight, dy, residual


def run(case, seed=0, check=True):
    """Run the case's calls on the default device and, with `check`,
    compare every result with the float64 reference."""
    x, weight, dy, residual = _inputs(case, seed)
    if case.kind == "norm":
        # y in the weight's dtype, and (where they differ) in x's
        for out_dtype in dict.fromkeys([weight.dtype, x.dtype]):
            op = lambda x, w: gpu_ops.rms_norm(x, w, out_dtype=out_dtype)  # noqa: E731
            results = _norm_and_vjp(op, x, weight, dy.astype(out_dtype))
            if check:
                _check_norm(x, weight, dy.astype(out_dtype), *results)
    elif case.kind == "residual":
        op = jax.jit(lambda x, w, r: gpu_ops.rms_norm(x, w, residual=r))
        dy, dtotal = dy.astype(weight.dtype), jnp.flip(dy, 0).astype(x.dtype)
        if check:
            reference.check_residual_op(op, x, weight, residual, dy, dtotal)
        else:
            jax.block_until_ready(jax.vjp(op, x, weight, residual)[1]((dy, dtotal)))
    elif case.kind == "float8_out":
        _run_float8_out(x, weight, residual, check)
    else:
        _run_float8_in(x, weight, dy, check)


def _norm_and_vjp(op, x, weight, dy):
    def norm_and_vjp(x, weight, dy):
        y, pullback = jax.vjp(op, x, weight)
        return (y, *pullback(dy))
    return jax.block_until_ready(jax.jit(norm_and_vjp)(x, weight, dy))


def _check_norm(x, weight, dy, y, dx, dweight):
    assert y.dtype == dy.dtype and dx.dtype == x.dtype and dweight.dtype == weight.dtype
    reference.assert_close(y, reference.forward(x, weight), y.dtype, x.dtype)
    want_dx, want_dweight = reference.vjp(x, weight, dy)
    reference.assert_close(dx, want_dx, x.dtype, x.dtype)
    reference.assert_close(dweight, want_dweight, weight.dtype, x.dtype)


def _run_float8_out(x, weight, residual, check):
    import test_float8  # the float64 checks of the float8 output
    scale = 0.01
    for r in (None, residual):
        total = x if r is None else x + r
        # (with a residual, x + residual follows, which the "residual"
        # kind's cases check)
        values, scales = jax.jit(lambda x, w, r: gpu_ops.rms_norm_fp8(x, w, residual=r))(
            x, weight, r)[:2]
        scaled, largest = jax.jit(
            lambda x, w, r: gpu_ops.rms_norm_fp8(x, w, residual=r, scale=scale))(x, weight, r)[:2]
        jax.block_until_ready((values, scales, scaled, largest))
        if check:
            test_float8._check_quantised(values, scales, total, weight, "ffi")
            test_float8._check_scaled(scaled, largest, total, weight, scale, "ffi")


def _run_float8_in(x, weight, dy, check):
    import test_from_fp8  # the float64 checks of the float8 input
    dy = dy.astype(weight.dtype)
    values, scales = float8.quantize(x)
    y, dx, dweight = _norm_and_vjp(gpu_ops.rms_norm_through_fp8_input, x, weight, dy)
    if check:
        read_back = test_from_fp8._read_back(values, scales)
        test_from_fp8._assert_close(y, reference.forward(read_back, weight), weight.dtype)
        want_dx, want_dweight = reference.vjp(read_back, weight, dy)
        # dx comes in x's dtype (float32) from a tangent in the weight's
        # (autodiff.through_fp8_input): as exact as the coarser of the two
        assert dx.dtype == x.dtype
        test_from_fp8._assert_close(dx.astype(weight.dtype), want_dx, weight.dtype)
        test_from_fp8._assert_close(dweight, want_dweight, weight.dtype)
