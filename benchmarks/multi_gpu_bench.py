"""Weak scaling of RMS norm across devices: three ways to run it sharded.

    python benchmarks/multi_gpu_bench.py [--out FILE] [--repeats N]

The per-device batch is fixed (on GPUs: 16,384 rows of 8,192 bfloat16 values
per device) and the input is sharded by rows over 1, 2, 4, ... devices. Each
variant runs the forward ("fwd") and forward + backward ("fwd_bwd") step:

- "naive": the per-device primitives called directly under jit. A custom
  call is opaque to XLA, so XLA gathers the whole input onto every device,
  and every device computes every row;
- "custom_partitioning": gpu_ops.rms_norm under jit; its partitioning rule
  keeps the rows where they are and sums the weight gradient across devices;
- "shard_map": gpu_ops.rms_norm inside jax.shard_map, written per device:
  the step takes its VJP inside the shard_map, with check_vma=False and an
  explicit psum of the weight gradient, as in the committed results, which
  were timed before gpu_ops typed its results for shard_map (the sharding
  chapter differentiates through the shard_map instead).

As in rms_norm_bench.py, the backward gets dy only once y exists
(`dy_after_y`). Each step's outputs keep the input's row sharding, so every
step of the chain starts from sharded data. Timing as in rms_norm_bench.py:
a jitted chain of steps, run back to back, median of `repeats` runs.
Weak-scaling efficiency is the step time on 1 device over the step time on n
devices.

On a machine without a GPU it runs small sizes on the virtual CPU devices
and says so: the numbers show the method, not the GPUs' speed.
"""

import argparse
import datetime
import json
import os
import pathlib
import sys

# 8 virtual CPU devices for the run without a GPU (this flag only affects the
# CPU platform, so GPUs are left as they are); set before JAX is imported.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

import gpu_ops  # noqa: E402
from gpu_ops.primitives import rms_norm_bwd_shard_p, rms_norm_fwd_shard_p  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from rms_norm_bench import commit, device_slug, dy_after_y, per_op_seconds  # noqa: E402

EPS = 1e-5


def naive_fwd(x, weight):
    return rms_norm_fwd_shard_p.bind(x, weight, eps=EPS)[0]


def naive_fwd_bwd(x, weight, dy):
    y, inv_rms = rms_norm_fwd_shard_p.bind(x, weight, eps=EPS)
    y, dy = dy_after_y(y, dy)
    dx, dweight = rms_norm_bwd_shard_p.bind(dy, inv_rms, x, weight, eps=EPS)
    return y, dx, dweight


def partitioned_fwd_bwd(x, weight, dy):
    y, pullback = jax.vjp(gpu_ops.rms_norm, x, weight)
    y, dy = dy_after_y(y, dy)
    return (y, *pullback(dy))


def shard_map_variant(mesh):
    rows, replicated = P("batch"), P()

    def local_fwd_bwd(x, weight, dy):
        y, dx, dweight = partitioned_fwd_bwd(x, weight, dy)
        return y, dx, jax.lax.psum(dweight, "batch")

    fwd = jax.shard_map(gpu_ops.rms_norm, mesh=mesh, in_specs=(rows, replicated),
                        out_specs=rows)
    # check_vma=False: the VJP leaves each device its own rows' share of the
    # weight gradient, which the psum adds up. (With check_vma the weight's
    # cast to varying would sum it already, and this psum would multiply the
    # sum by the number of devices.)
    fwd_bwd = jax.shard_map(local_fwd_bwd, mesh=mesh, in_specs=(rows, replicated, rows),
                            out_specs=(rows, rows, replicated), check_vma=False)
    return fwd, fwd_bwd


def steps(variant, mesh):
    """The fwd and fwd_bwd chain steps of one variant, keeping rows sharded."""
    rows = NamedSharding(mesh, P("batch"))
    if variant == "naive":
        fwd, fwd_bwd = naive_fwd, naive_fwd_bwd
    elif variant == "custom_partitioning":
        fwd, fwd_bwd = gpu_ops.rms_norm, partitioned_fwd_bwd
    else:
        fwd, fwd_bwd = shard_map_variant(mesh)

    def fwd_step(x, weight, dy):
        return jax.lax.with_sharding_constraint(fwd(x, weight), rows), weight, dy

    def fwd_bwd_step(x, weight, dy):
        y, dx, dweight = fwd_bwd(x, weight, dy)
        y, dx = (jax.lax.with_sharding_constraint(a, rows) for a in (y, dx))
        return y, weight + 0 * dweight, dx  # as in rms_norm_bench.py

    return {"fwd": fwd_step, "fwd_bwd": fwd_bwd_step}


VARIANTS = ("naive", "custom_partitioning", "shard_map")


def run(devices, counts, rows, row_len, dtype, calls, repeats, out):
    common = {"device": devices[0].device_kind, "jax_version": jax.__version__,
              "commit": commit(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "dtype": dtype, "rows": rows, "row_len": row_len}
    records = []
    for n in counts:
        mesh = jax.make_mesh((n,), ("batch",), axis_types=(AxisType.Auto,),
                             devices=devices[:n])
        kx, kw, kd = jax.random.split(jax.random.key(0), 3)
        shape = (n * rows, row_len)
        row_sharded = NamedSharding(mesh, P("batch"))
        x = jax.random.normal(kx, shape, jnp.float32).astype(dtype)
        dy = jax.random.normal(kd, shape, jnp.float32).astype(dtype)
        weight = (1 + 0.1 * jax.random.normal(kw, (row_len,), jnp.float32)).astype(dtype)
        args = (jax.device_put(x, row_sharded), jax.device_put(weight, NamedSharding(mesh, P())),
                jax.device_put(dy, row_sharded))
        reference = {op: jax.jit(step)(*args)
                     for op, step in steps("custom_partitioning", mesh).items()}
        for variant in VARIANTS:
            for op, step in steps(variant, mesh).items():
                _check(jax.jit(step)(*args), reference[op], variant, op)
                seconds = per_op_seconds(step, args, calls, repeats)
                record = {**common, "num_devices": n, "variant": variant, "op": op,
                          "median_us": round(seconds * 1e6, 2)}
                records.append(record)
                out.write_text(json.dumps(records, indent=1) + "\n")
                print(f"{n} devices {variant:20} {op:8} {record['median_us']:10.1f} us",
                      flush=True)
    return records


def _check(actual, expected, variant, op):
    for a, e in zip(actual, expected):
        a, e = np.asarray(a, np.float32), np.asarray(e, np.float32)
        if not np.allclose(a, e, rtol=2e-2, atol=2e-2 * max(1.0, float(np.abs(e).max()))):
            raise AssertionError(f"{variant} {op} disagrees with custom_partitioning")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path,
                        help="JSON file (default: results/benchmarks/multi_gpu_<device>.json)")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--calls", type=int, default=1)
    parser.add_argument("--rows", type=int, help="rows per device")
    parser.add_argument("--row-len", type=int)
    args = parser.parse_args(argv)
    on_gpu = jax.default_backend() == "gpu"
    devices = jax.devices() if on_gpu else jax.devices("cpu")
    if on_gpu:
        rows, row_len, dtype = 16_384, 8_192, "bfloat16"
    else:
        print("No GPU: running small cases on CPU devices to show the method "
              "(not the GPUs' speed).")
        rows, row_len, dtype = 256, 1_024, "bfloat16"
    rows, row_len = args.rows or rows, args.row_len or row_len
    counts = [n for n in (1, 2, 4, 8) if n <= len(devices)]
    out = args.out or (RESULTS / f"multi_gpu_{device_slug(devices[0].device_kind)}.json")
    records = run(devices, counts, rows, row_len, dtype, args.calls, args.repeats, out)
    print(f"wrote {len(records)} records to {out}")


if __name__ == "__main__":
    sys.exit(main())
