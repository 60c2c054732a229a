"""Benchmark RMS norm implementations against XLA and the copy bandwidth.

    python benchmarks/rms_norm_bench.py [--cases main|model|paths] [--out FILE] [--repeats N] [--row-len N ...]
                                        [--rows N ...] [--dtype NAME ...] [--impl NAME ...]
                                        [--case DTYPE ROWS ROW_LEN ...] [--resume]
                                        [--without PATH ...] [--compare-paths]

Each case is timed on one device, in one run, for each implementation:
gpu_ops' default (fast) kernels, and on a GPU the seed's apex-derived
kernels and gpu_ops' Pallas kernels (implementation="pallas"), and XLA's
fused jax.numpy version; forward alone ("fwd") and forward +
backward through jax.vjp with a random cotangent ("fwd_bwd"). The cotangent
reaches the backward through an optimisation barrier together with the
forward's output: in a network it exists only once y does.

Timing is on the device: one jitted call chains applications of the op
(each one's outputs are the next one's inputs, so none can be skipped or
overlapped), `calls` such calls run back to back, each on the last one's
outputs, with one synchronisation at the end, and the time per op of the
median of `repeats` such runs is reported, after a warm-up. On a GPU, the
chain and the number of calls grow with how fast the op could be at the
copy bandwidth (see `plan`): a chain
keeps the device busy for at least MIN_CALL_SECONDS, so the host's dispatch
of the next call hides behind it, and a run lasts at least MIN_RUN_SECONDS,
so its start and its synchronisation add under a few percent to the time.
Inputs are random; each implementation's results are checked against XLA's
before it is timed. The device's copy bandwidth (read + write of a 1 GiB
buffer, by a chained elementwise negation) is measured the same way in the
same run. On a GPU, one more call of each implementation's chain runs
under JAX's profiler (kernel_profile.py), and its record says which kernels
ran, how long each took, and how long the GPU ran none, per op.

`--cases model` times the model-shape set instead (shared/DESIGN.md): the
shapes where models call the norm, each a norm between matmuls (the chain's
barriers stand for them), gpu_ops against XLA only, into
results/benchmarks/model_shapes_<device>.json.

On a machine without a GPU it runs small sizes and says so: the CPU numbers
show the method, not the kernels' speed.
"""

import argparse
import concurrent.futures
import datetime
import functools
import json
import math
import os
import pathlib
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import gpu_ops
from gpu_ops import kernel_plans

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import apex_seed  # noqa: E402  (benchmarks/apex_seed)
import kernel_profile  # noqa: E402
import path_comparison  # noqa: E402

GPU_CASES = [
    *[(dtype, rows, row_len)
      for dtype in ("bfloat16", "float32")
      for rows in (16_384, 32_768)
      for row_len in (1_024, 4_096, 8_192, 16_384)],
    *[(dtype, 32, 512 * 512) for dtype in ("bfloat16", "float32")],  # the seed's (32, 512, 512)
    *[(dtype, 512, 4_096) for dtype in ("bfloat16", "float32")],  # launch overhead dominates
]
CPU_CASES = [("bfloat16", 256, 1_024), ("float32", 256, 1_024), ("float32", 32, 16_384)]
#: The model-shape set: hidden sizes over tokens from one (decoding) to 65,536
#: (training, prefill), and QK-norm over head_dim, a row per token and head
#: (1 to 8,192 tokens of 32 heads); bfloat16, and bfloat16 x with a float32
#: weight ("bfloat16/float32": x's dtype / the weight's; y is x's, out_dtype).
MODEL_HIDDEN = (2_048, 4_096, 5_120, 7_168, 8_192, 16_384)
MODEL_TOKENS = (1, 8, 64, 1_024, 8_192, 65_536)
MODEL_HEAD_DIMS = (64, 128, 256)
MODEL_HEAD_ROWS = (32, 256, 2_048, 16_384, 65_536, 262_144)
MODEL_DTYPES = ("bfloat16", "bfloat16/float32")
MODEL_CASES = [(dtype, rows, row_len) for dtype in MODEL_DTYPES
               for row_len, rows in [*((h, t) for h in MODEL_HIDDEN for t in MODEL_TOKENS),
                                     *((d, r) for d in MODEL_HEAD_DIMS for r in MODEL_HEAD_ROWS)]]
CPU_MODEL_CASES = [("bfloat16", 8, 2_048), ("bfloat16/float32", 256, 128)]
MODEL_IMPLS = ("gpu_ops", "xla")
#: Cases that together take every kernel path of an H100 (gpu_ops.kernel_plans),
#: from one row to 64 MB of x: to measure each path against the one the
#: planner takes without it (--compare-paths --cases paths).
PATH_CASES = [
    ("bfloat16", 262_144, 128),  # short rows (a QK-norm)
    ("bfloat16", 8, 4_096),  # decoding a batch: rows and columns (backward)
    ("bfloat16", 1, 16_384),  # decoding one sequence: column slices (backward)
    ("bfloat16", 16_384, 1_024),  # rows a block holds
    ("bfloat16", 2_048, 16_384),  # a row a 1024-thread block
    ("bfloat16", 1_024, 32_768), ("bfloat16", 512, 65_536),  # a row a cluster
]


def xla_rms_norm(x, weight, eps=1e-5, out_dtype=None):
    """RMS norm in jax.numpy, which XLA fuses: the baseline to beat."""
    x32 = x.astype(jnp.float32)
    inv = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (x32 * inv * weight.astype(jnp.float32)).astype(out_dtype or weight.dtype)


#: Where each device's latest results file lives.
RESULTS = pathlib.Path(__file__).resolve().parents[1] / "results" / "benchmarks"
CHAIN = 20  # ops per jitted call, at least
#: A chain is unrolled, so its compile time grows with its length: chains of
#: the smallest forward + backward ops, 200 long, took XLA far longer to
#: compile than to time, while 64 such ops still keep the GPU busier than the
#: host's calls do.
MAX_CHAIN = 64
MIN_CALL_SECONDS = 1e-3
MIN_RUN_SECONDS = 20e-3
#: No op on a GPU takes less: launching a kernel alone costs about this. Below
#: it, the bytes' time would plan runs of thousands of calls for ops of a few
#: kilobytes, each timed run lasting seconds instead of MIN_RUN_SECONDS.
MIN_OP_SECONDS = 1e-6
#: How many of an op's kernels, the longest first, a record names.
TOP_KERNELS = 6


def plan(nbytes, copy_gbps, calls):
    """(ops per jitted call, calls per timed run) for an op moving `nbytes`.

    The op cannot take less than nbytes at the copy bandwidth, nor less than
    MIN_OP_SECONDS; the chain and the calls are sized on that lower bound, so
    they are long enough whatever the op's real speed.
    """
    fastest = max(MIN_OP_SECONDS, nbytes / (copy_gbps * 1e9))
    def at_least(ratio):  # the whole number of times, not one more for a rounding error
        return math.ceil(round(ratio, 9))
    chain = min(MAX_CHAIN, max(CHAIN, at_least(MIN_CALL_SECONDS / fastest)))
    return chain, max(calls, at_least(MIN_RUN_SECONDS / (chain * fastest)))


def in_x_dtype(impl):
    """impl(x, weight) with y in x's dtype: a model that keeps a float32 weight
    for bfloat16 activations takes y back in bfloat16 for its next matmul."""
    return lambda x, weight: impl(x, weight, out_dtype=x.dtype)


def implementations(on_gpu):
    """The implementations, each a function of (x, weight), y in x's dtype."""
    impls = {"gpu_ops": in_x_dtype(gpu_ops.rms_norm), "xla": in_x_dtype(xla_rms_norm)}
    if on_gpu:  # the seed's kernels exist for CUDA only (and take one dtype),
        # and Pallas' are interpreted elsewhere
        impls["apex_seed"] = apex_seed.rms_norm_apex_seed
        impls["pallas"] = in_x_dtype(functools.partial(gpu_ops.rms_norm,
                                                       implementation="pallas"))
    return impls


def dtypes_of(dtype):
    """(x's dtype, the weight's) of a case's dtype, "x" or "x/weight"."""
    x, _, weight = dtype.partition("/")
    return x, weight or x


def minimum_bytes(op, dtype, rows, row_len):
    """Bytes the op must move (shared/DESIGN.md, performance method); y, dy
    and dx have x's dtype, the weight and its gradient the weight's."""
    x_item, w_item = (jnp.dtype(d).itemsize for d in dtypes_of(dtype))
    values, inv = rows * row_len, rows * 4
    forward = values * 2 * x_item + row_len * w_item + inv  # read x, w; write y, inv_rms
    # read dy, x, w, inv_rms; write dx, dw
    backward = values * 3 * x_item + 2 * row_len * w_item + inv
    return forward if op == "fwd" else forward + backward


def chained(step, chain=CHAIN):
    """A jitted function of one tuple of arrays applying step `chain` times,
    each on the last one's outputs.

    The optimisation barrier keeps XLA from fusing one step into the next, so
    every step reads its inputs from and writes its outputs to memory. The
    tuple is donated: the caller passes each call's outputs to the next call,
    as the chain passes each step's outputs to the next step.
    """
    def run(args):
        for _ in range(chain):
            args = jax.lax.optimization_barrier(step(*args))
        return args
    return jax.jit(run, donate_argnums=0)


def compiled_all(jobs):
    """Each (jitted function, its arguments) of `jobs` compiled for those
    arguments, all at once: XLA compiles without Python's lock, so a case's
    functions (each implementation's chains and checks) compile side by side
    in threads. The chains of the model-shape set's small ops take longer to
    compile than to time; one after another, a whole run on one GPU outlasted
    a GPU machine's calls."""
    with concurrent.futures.ThreadPoolExecutor(max(1, len(jobs))) as pool:
        return list(pool.map(lambda job: job[0].lower(*job[1]).compile(), jobs))


def per_op_seconds(step, args, calls, repeats, chain=CHAIN, profile=False, compiled=None):
    """Seconds per step, over runs of `calls` chains of `chain` steps; with
    profile, (those seconds, kernel_profile.kernel_times of one more call
    under the profiler, per step). compiled: chained(step, chain) already
    compiled for args (compiled_all).

    Each call takes the last one's outputs, so XLA launches the CUDA graph
    it recorded for the chain (its command buffer) as it is. Called on the
    same arguments again and again, each call's outputs are new buffers and
    XLA records the whole graph again on every call: host work that grows
    with the chain, and that can take as long as the GPU's work for small
    inputs, so that the host would be timed instead of the kernels.
    """
    fn = compiled or chained(step, chain)
    args = tuple(jnp.copy(a) for a in args)  # the caller's arrays stay valid
    args = jax.block_until_ready(fn(args))  # compile (if not compiled) and warm up
    args = jax.block_until_ready(fn(args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            args = fn(args)
        jax.block_until_ready(args)
        times.append((time.perf_counter() - start) / (calls * chain))
    seconds = statistics.median(times)
    if not profile:
        return seconds
    _, trace = kernel_profile.traced(lambda: jax.block_until_ready(fn(args)))
    return seconds, kernel_profile.kernel_times(trace, chain, TOP_KERNELS)


def copy_gbps(device_bytes, calls, repeats):
    x = jnp.ones(device_bytes // 4, jnp.float32)
    seconds = per_op_seconds(lambda a: (jnp.negative(a),), (x,), calls, repeats)
    return 2 * x.nbytes / seconds / 1e9


def dy_after_y(y, dy):
    """(y, dy) such that the backward can read dy only once y exists.

    In a network dy comes from the layers after this one, so it only exists
    once y does. The optimisation barrier makes that so in the benchmark:
    without it, XLA computes the backward's row sums in the forward's pass
    over x, which no network allows.
    """
    return jax.lax.optimization_barrier((y, dy))


def op_functions(impl):
    """The two ops, as (what is checked, one step of the timed chain)."""
    def fwd(x, weight, dy):
        del dy
        return impl(x, weight)

    def fwd_bwd(x, weight, dy):
        y, pullback = jax.vjp(impl, x, weight)
        y, dy = dy_after_y(y, dy)
        return (y, *pullback(dy))

    # Each step's outputs are the next one's inputs, of the same dtypes (y
    # and dx have x's), and the next step reads each result (XLA drops what
    # no later step reads, barrier or not): y is the next x, and in the
    # forward + backward dx the next dy.
    def fwd_step(x, weight, dy):
        return fwd(x, weight, dy), weight, dy

    def fwd_bwd_step(x, weight, dy):
        y, dx, dweight = fwd_bwd(x, weight, dy)
        # The next step reads all three results; adding 0 * dweight keeps the
        # weight (and the values bounded) while making dweight necessary.
        return y, weight + 0 * dweight, dx

    return {"fwd": (jax.jit(fwd), fwd_step), "fwd_bwd": (jax.jit(fwd_bwd), fwd_bwd_step)}


def finished_cases(records, impls):
    """The records of `records` whose case every op of every impl has timed.

    A run cut off in a case leaves part of it; resuming measures that case
    again, whole, so each case's implementations are timed side by side.
    """
    def case(r):
        return r["dtype"], r["rows"], r["row_len"]
    timed = {}
    for r in records:
        timed.setdefault(case(r), set()).add((r["op"], r["impl"]))
    whole = {c for c, ops in timed.items()
             if ops == {(op, impl) for op in ("fwd", "fwd_bwd") for impl in impls}}
    return [r for r in records if case(r) in whole]


def run_identity():
    """What every record of this run says of it, its date aside: device, JAX
    version, commit, and the paths left out of the plans if any."""
    identity = {"device": jax.devices()[0].device_kind, "jax_version": jax.__version__,
                "commit": commit()}
    without, _ = kernel_plans.left_out()
    if without:  # a partial run (--without)
        identity["plan_without"] = ",".join(without)
    return identity


def of_this_run(records, record_plans):
    """The records of `records` that this run could have written: the same
    run_identity(), with the kernel paths named (a partial run's gpu_ops
    records) exactly where this run names them. A resumed run keeps no
    others, so that its file is one run's."""
    this = run_identity()
    return [r for r in records
            if all(r.get(key) == this.get(key) for key in {*this, "plan_without"})
            and ("plan" in r) == (record_plans and r["impl"] == "gpu_ops")]


def run(cases, calls, repeats, copy_bytes, on_gpu, out, timed_impls=None, done=(),
        record_plans=False):
    """Measure every case; rewrite `out` after each one, so a cut-off run keeps its data.

    timed_impls: the implementations to time (default: all); XLA's results
    are the reference of the checks either way. done: the records of cases
    already measured (a resumed run), kept in `out` and not measured again.
    record_plans: gpu_ops' records name the kernel paths the handlers planned.
    """
    device = jax.devices()[0]
    common = {**run_identity(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    bandwidth = copy_gbps(copy_bytes, calls, repeats)
    print(f"{device.device_kind}: copy bandwidth {bandwidth:.0f} GB/s", flush=True)
    records = list(done)
    measured = {(r["dtype"], r["rows"], r["row_len"]) for r in records}
    for dtype, rows, row_len in cases:
        if (dtype, rows, row_len) in measured:
            continue
        kx, kw, kd = jax.random.split(jax.random.key(0), 3)
        x_dtype, w_dtype = dtypes_of(dtype)
        x = jax.random.normal(kx, (rows, row_len), jnp.float32).astype(x_dtype)
        weight = (1 + 0.1 * jax.random.normal(kw, (row_len,), jnp.float32)).astype(w_dtype)
        dy = jax.random.normal(kd, (rows, row_len), jnp.float32).astype(x_dtype)
        functions = {name: op_functions(impl) for name, impl in implementations(on_gpu).items()}
        timed = [(op, name) for op in ("fwd", "fwd_bwd") for name in functions
                 if not timed_impls or name in timed_impls]
        # The forward does not read dy. A scalar in its place keeps the chain
        # from copying a whole matrix at its end (a jitted function's outputs
        # that are its inputs are copied).
        timed_args = {"fwd": (x, weight, jnp.zeros((), x_dtype)), "fwd_bwd": (x, weight, dy)}
        nbytes = {op: minimum_bytes(op, dtype, rows, row_len) for op in timed_args}
        runs = {op: plan(nbytes[op], bandwidth, calls) if on_gpu else (CHAIN, calls)
                for op in timed_args}
        # XLA's results are the reference of every check, timed or not.
        jobs = {("check", op, name): (functions[name][op][0], (x, weight, dy))
                for op in timed_args for name in {"xla", *(n for _, n in timed)}}
        jobs |= {("chain", op, name): (chained(functions[name][op][1], runs[op][0]),
                                       (timed_args[op],)) for op, name in timed}
        compiled = dict(zip(jobs, compiled_all(list(jobs.values()))))
        expected = {op: compiled["check", op, "xla"](x, weight, dy) for op in timed_args}
        for op, name in timed:
            _check(compiled["check", op, name](x, weight, dy), expected[op], name, op)
            chain, case_calls = runs[op]
            timing = per_op_seconds(functions[name][op][1], timed_args[op], case_calls,
                                    repeats, chain, profile=on_gpu,
                                    compiled=compiled["chain", op, name])
            seconds, kernels = timing if on_gpu else (timing, None)
            record = {**common, "op": op, "impl": name, "dtype": dtype, "rows": rows,
                      "row_len": row_len, "median_us": round(seconds * 1e6, 2),
                      "bytes": nbytes[op], "gbps": round(nbytes[op] / seconds / 1e9, 1),
                      "copy_gbps": round(bandwidth, 1)}
            if kernels:
                record |= kernel_record(kernels)
            if record_plans and name == "gpu_ops":
                record["plan"] = planned_paths((dtype, rows, row_len))
            records.append(record)
            out.write_text(json.dumps(records, indent=1) + "\n")
            print(record_line(record), flush=True)
    return records


def kernel_record(kernels):
    """The fields of a record from kernel_profile.kernel_times per op, in
    microseconds per op: the time in which a kernel ran ("busy_us"), the
    time from the first kernel's start to the last one's end ("span_us"; the
    GPU ran none for span_us - busy_us), and the longest kernels by their
    short names ("kernels": [name, microseconds]). A kernel launched early
    (dependent_launch.cuh) runs beside the one before it while it waits for
    it, so the kernels' times may add up to more than busy_us."""
    return {"busy_us": round(kernels["busy"] / 1e3, 2),
            "span_us": round(kernels["span"] / 1e3, 2),
            "kernels": [[kernel_profile.short_name(name), round(ns / 1e3, 2)]
                        for name, ns in kernels["top_kernels"]]}


def planned_paths(case, gpu=None):
    """{direction: kernel path} of a case on this GPU (or a kernel_plans.GpuModel)."""
    dtype, rows, row_len = case
    x_dtype, weight_dtype = dtypes_of(dtype)
    return {d: kernel_plans.kernel_plan(d, (rows, row_len), x_dtype, gpu=gpu,
                                        weight_dtype=weight_dtype)["path"]
            for d in kernel_plans.DIRECTIONS}


def record_line(r, decimals=1):
    """One record as the benchmark prints it."""
    return (f"{r['op']:8} {r['impl']:10} {r['dtype']:16} {r['rows']:6} x {r['row_len']:<7} "
            f"{r['median_us']:10.{decimals}f} us {r['gbps']:8.1f} GB/s "
            f"({r['gbps'] / r['copy_gbps']:.0%} of copy)")


def _check(actual, expected, name, op):
    actual = actual if isinstance(actual, tuple) else (actual,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for a, e in zip(actual, expected):
        a, e = np.asarray(a, np.float32), np.asarray(e, np.float32)
        tol = 5e-2 * max(1.0, float(np.abs(e).max()))
        if not np.allclose(a, e, rtol=5e-2, atol=tol):
            raise AssertionError(f"{name} {op} disagrees with XLA before timing")


def commit():
    """The commit measured: GPU_OPS_COMMIT if set (a copied tree), else git's HEAD."""
    if os.environ.get("GPU_OPS_COMMIT"):
        return os.environ["GPU_OPS_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("GPU_OPS_COMMIT", "unknown")


def join_parts(parts, out, cases_name):
    """Writes the records of the --part files `parts`, which must be of one
    run and measure no case twice, to `out` (default: the device's results
    file of `cases_name`), in the order of the cases."""
    records = [r for part in parts for r in json.loads(part.read_text())]
    identities = {(r["device"], r["jax_version"], r["commit"]) for r in records}
    if len(identities) != 1:
        raise SystemExit(f"--join: the parts are of {len(identities)} runs, not one: "
                         f"{sorted(identities)}")
    keys = [(r["op"], r["impl"], r["dtype"], r["rows"], r["row_len"]) for r in records]
    if len(set(keys)) != len(keys):
        raise SystemExit("--join: a case is measured in more than one part")
    order = {case: i for i, case in enumerate({"model": MODEL_CASES, "paths": PATH_CASES,
                                               "main": GPU_CASES}[cases_name])}
    records.sort(key=lambda r: order.get((r["dtype"], r["rows"], r["row_len"]), len(order)))
    out = out or results_file(cases_name, records[0]["device"])
    out.write_text(json.dumps(records, indent=1) + "\n")
    print(f"wrote {len(records)} records of {len(parts)} parts to {out}")


def results_file(cases_name, device_kind):
    """The device's latest results file of a run of `cases_name`: the
    model-shape set's, or the main cases'."""
    prefix = "model_shapes_" if cases_name == "model" else ""
    return RESULTS / f"{prefix}{device_slug(device_kind)}.json"


def device_slug(kind):
    return "".join(c if c.isalnum() else "-" for c in kind.lower()).strip("-")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path,
                        help="JSON file (default: results/benchmarks/<device>.json)")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--row-len", type=int, nargs="+",
                        help="only the cases of these row lengths")
    parser.add_argument("--rows", type=int, nargs="+",
                        help="only the cases of these numbers of rows")
    parser.add_argument("--dtype", nargs="+", choices=["bfloat16", "float32", "bfloat16/float32"],
                        help="only the cases of these dtypes")
    parser.add_argument("--impl", nargs="+", choices=["gpu_ops", "apex_seed", "pallas", "xla"],
                        help="only these implementations (a partial run, not a results file)")
    parser.add_argument("--cases", choices=["main", "model", "paths"], default="main",
                        help="the main cases (a results file), the model-shape set (a "
                             "results file of its own), or PATH_CASES, which take every "
                             "kernel path (a partial run; on a GPU)")
    parser.add_argument("--without", nargs="+", metavar="PATH",
                        help="kernel paths the CUDA handlers leave out of their plans "
                             "(gpu_ops.kernel_plans.leave_out and PATHS): to measure a "
                             "path against the one that takes its rows otherwise (a partial "
                             "run, not a results file)")
    parser.add_argument("--case", action="append", nargs=3,
                        metavar=("DTYPE", "ROWS", "ROW_LEN"),
                        help="only this case (repeatable; a partial run)")
    parser.add_argument("--compare-paths", action="store_true",
                        help="time each kernel path against the one the planner takes without "
                             "it, over the cases that take it (path_comparison.py; on a GPU, "
                             "with --out)")
    parser.add_argument("--part", metavar="I/N",
                        help="measure every N-th case from the I-th (counting from 0), with "
                             "--out: one of N processes that share a run, each on a GPU of its "
                             "own (CUDA_VISIBLE_DEVICES), whose files --join makes one")
    parser.add_argument("--join", nargs="+", type=pathlib.Path, metavar="PART",
                        help="write the records of these --part files, of one run (device, "
                             "JAX version, commit), as one results file (--out, or the "
                             "device's), in the order of the cases; measures nothing")
    parser.add_argument("--resume", action="store_true",
                        help="keep the whole cases that a run like this one (same commit, JAX "
                             "and plan setting) left in the output file and measure the rest "
                             "(a full run can outlast one call to a GPU machine)")
    args = parser.parse_args(argv)
    if args.join:
        return join_parts(args.join, args.out, args.cases)
    if args.part and not args.out:
        parser.error("--part measures part of the cases: give --out (then --join the parts)")
    if args.impl and not args.out:
        parser.error("--impl times part of the implementations: give --out, so the results file stays whole")
    if args.without:
        if not args.out:
            parser.error("--without times other kernels than gpu_ops': give --out, so the "
                         "results file stays gpu_ops' own")
        unknown = set(args.without) - set(kernel_plans.PATHS[:-1])
        if unknown:
            parser.error(f"--without: {sorted(unknown)} are not among the paths that can be "
                         f"left out, {kernel_plans.PATHS[:-1]}")
    if args.compare_paths and (not args.out or args.without or args.impl):
        parser.error("--compare-paths chooses the paths and implementations itself: give "
                     "--out, and neither --without nor --impl")
    # Only once every argument is checked (a refused call changes nothing, in
    # a process that goes on, as a test's does): before anything runs, as the
    # handlers read it when they plan a call.
    if args.without:
        kernel_plans.leave_out(args.without)
    if args.compare_paths:
        # Its runs are processes of their own, which need the GPU's memory.
        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    on_gpu = jax.default_backend() == "gpu"
    timed_impls = args.impl or (list(MODEL_IMPLS) if args.cases == "model" else None)
    if (on_gpu and not args.compare_paths and "apex_seed" in (timed_impls or ["apex_seed"])
            and not apex_seed.built()):
        parser.error("the seed's kernels, the baseline, are not built: GPU_OPS_APEX_SEED=1 "
                     "./build.sh (or leave them out with --impl)")
    if not on_gpu:
        print("No GPU: running small CPU cases to show the method (not the kernels' speed).")
    if (args.cases == "paths" or args.compare_paths) and not (on_gpu and args.out):
        parser.error("--cases paths and --compare-paths time the kernel paths of a GPU: run "
                     "them on one, with --out")
    cases = {"paths": PATH_CASES, "model": MODEL_CASES if on_gpu else CPU_MODEL_CASES,
             "main": GPU_CASES if on_gpu else CPU_CASES}[args.cases]
    for wanted, index in ((args.dtype, 0), (args.rows, 1), (args.row_len, 2)):
        if wanted:
            cases = [case for case in cases if case[index] in wanted]
    if args.case:
        try:
            asked = {(dtype, int(rows), int(row_len)) for dtype, rows, row_len in args.case}
        except ValueError:
            parser.error(f"--case takes DTYPE ROWS ROW_LEN, ROWS and ROW_LEN whole numbers; "
                         f"got {args.case}")
        unknown = asked - set(cases)
        if unknown:
            parser.error(f"--case: {sorted(unknown)} are not among the {args.cases} cases "
                         f"(after the other filters)")
        cases = [case for case in cases if case in asked]
    if args.part:
        index, _, count = args.part.partition("/")
        if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
            parser.error(f"--part takes I/N, 0 <= I < N, got {args.part!r}")
        cases = cases[int(index)::int(count)]
    if args.compare_paths:
        timing = ["--repeats", str(args.repeats), "--calls", str(args.calls)]
        path_comparison.compare_paths(args.cases, cases, args.out, timing, planned_paths)
        return
    copy_bytes = 1 << 30 if on_gpu else 1 << 26
    out = args.out or results_file(args.cases, jax.devices()[0].device_kind)
    partial_run = bool(args.cases == "paths" or args.without or args.impl or args.case)
    record_plans = on_gpu and partial_run
    done = []
    if args.resume and out.exists():
        impls = timed_impls or list(implementations(on_gpu))
        found = json.loads(out.read_text())
        done = finished_cases(of_this_run(found, record_plans), impls)
        print(f"resuming: {len(done)} records of whole cases kept from {out}; "
              f"{len(found) - len(done)} left out (of cut cases, or of another run)")
    records = run(cases, args.calls, args.repeats, copy_bytes, on_gpu, out, timed_impls, done,
                  record_plans=record_plans)
    print(f"wrote {len(records)} records to {out}")


if __name__ == "__main__":
    sys.exit(main())
