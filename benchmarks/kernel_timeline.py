"""Where the time of one benchmark case goes: each GPU kernel's duration and the gaps between them.

    python benchmarks/kernel_timeline.py --dtype bfloat16 --rows 16384 --row-len 4096

Runs the steps that rms_norm_bench.py times, in chains of its CHAIN ops, under
jax.profiler, reads the trace back with jax.profiler.ProfileData and prints,
per implementation and op, every kernel name with its count and median
duration, then the stream's busy time and idle time per op. A difference
between the benchmark's time per op and the kernels' own time shows here as
idle time or as kernels the op did not need.
"""

import argparse
import collections
import pathlib
import statistics
import sys
import tempfile

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import rms_norm_bench as bench  # noqa: E402


def kernel_events(trace_dir):
    """(name, start_ns, end_ns) of every event on a GPU plane, by stream line."""
    files = list(pathlib.Path(trace_dir).rglob("*.xplane.pb"))
    if not files:
        raise RuntimeError(f"jax.profiler wrote no trace under {trace_dir}")
    lines, others = collections.defaultdict(list), []
    for plane in jax.profiler.ProfileData.from_file(str(files[0])).planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        for line in plane.lines:
            if line.name.startswith("Stream"):
                lines[f"{plane.name} {line.name}"] += [
                    (e.name, e.start_ns, e.end_ns) for e in line.events]
            else:
                others.append(f"{plane.name} {line.name}")
    return lines, others


def summarise(lines, ops):
    for line, events in lines.items():
        events.sort(key=lambda e: e[1])
        by_name = collections.defaultdict(list)
        for name, start, end in events:
            by_name[name].append(end - start)
        busy = sum(end - start for _, start, end in events)
        span = events[-1][2] - events[0][1]
        print(f"  {line}: {len(events)} events")
        for name, durations in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
            print(f"    {len(durations):5} x {statistics.median(durations) / 1e3:9.2f} us  {name[:90]}")
        print(f"    per op: busy {busy / ops / 1e3:.2f} us, idle {(span - busy) / ops / 1e3:.2f} us"
              f" (span {span / ops / 1e3:.2f} us over {ops} ops)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--rows", type=int, default=16_384)
    parser.add_argument("--row-len", type=int, default=4_096)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--impl", nargs="+", default=None)
    parser.add_argument("--op", nargs="+", default=["fwd", "fwd_bwd"])
    args = parser.parse_args(argv)
    if jax.default_backend() != "gpu":
        print(f"kernel_timeline.py: JAX runs on {jax.default_backend()} here, and only a GPU's "
              "trace holds kernels to time; rms_norm_bench.py runs without a GPU.")
        return 1
    key = jax.random.key(0)
    x = jax.random.normal(key, (args.rows, args.row_len), jnp.float32).astype(args.dtype)
    weight = jnp.ones((args.row_len,), args.dtype)
    for name, impl in bench.implementations(on_gpu=True).items():
        if args.impl and name not in args.impl:
            continue
        for op in args.op:
            dy = x if op == "fwd_bwd" else jnp.zeros((), args.dtype)
            fn = bench.chained(bench.op_functions(impl)[op][1])
            chain_args = jax.block_until_ready(fn((x.copy(), weight.copy(), dy.copy())))
            with tempfile.TemporaryDirectory() as trace_dir:
                with jax.profiler.trace(trace_dir):
                    for _ in range(args.calls):
                        chain_args = fn(chain_args)
                    jax.block_until_ready(chain_args)
                lines, others = kernel_events(trace_dir)
            print(f"{name} {op} {args.dtype} {args.rows} x {args.row_len}:")
            if not lines:
                print(f"  no GPU stream in the trace; other GPU lines: {others}")
            summarise(lines, args.calls * bench.CHAIN)


if __name__ == "__main__":
    sys.exit(main())
