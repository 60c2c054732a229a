"""The collectives XLA compiles for chapter 7's three ways of sharding RMS norm.

    python tools/sharding_hlo.py OUT.json

Run on a machine with several GPUs (tools/gpu_checks.sh's "sharding" step);
the machine's GPU-checks summary keeps what it found and the sharding
chapter shows it. For each program it lists the collective operations in
the compiled HLO (none, for the forward with shard_map or
custom_partitioning; one all-reduce of the weight gradient for the gradient
with custom_partitioning).
"""

import json
import sys

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import gpu_ops
from gpu_ops.primitives import rms_norm_fwd_shard_p

COLLECTIVES = ("all-gather", "all-reduce", "all-to-all", "collective-permute")


def collectives(fn, *args):
    hlo = jax.jit(fn).lower(*args).compile().as_text()
    return [line.strip()[:110] for line in hlo.splitlines()
            if any(f" {name}(" in line or f" {name}-start(" in line for name in COLLECTIVES)]


def main(out):
    devices = jax.devices()
    n = len(devices)
    mesh = jax.make_mesh((n,), ("batch",), axis_types=(AxisType.Auto,), devices=devices)
    x = jax.random.normal(jax.random.key(0), (n * 4, 512, 512), jnp.float32)
    weight = jnp.ones((512, 512), jnp.float32)
    x = jax.device_put(x, NamedSharding(mesh, P("batch")))
    dy = x
    weight = jax.device_put(weight, NamedSharding(mesh, P()))
    per_device = jax.shard_map(gpu_ops.rms_norm, mesh=mesh, in_specs=(P("batch"), P()),
                               out_specs=P("batch"))
    grad = jax.grad(lambda x, w, dy: jnp.vdot(gpu_ops.rms_norm(x, w), dy), argnums=(0, 1))
    sections = {
        "naive (the per-device primitive under jit), forward":
            (lambda x, w: rms_norm_fwd_shard_p.bind(x, w, eps=1e-5)[0], (x, weight)),
        "shard_map, forward": (per_device, (x, weight)),
        "custom_partitioning, forward": (gpu_ops.rms_norm, (x, weight)),
        "custom_partitioning, gradient": (grad, (x, weight, dy)),
    }
    found = {"devices": n, "device_kind": devices[0].device_kind, "jax": jax.__version__,
             "x": f"f32[{n * 4},512,512] sharded by rows",
             "programs": {title: collectives(fn, *args) for title, (fn, args) in sections.items()}}
    with open(out, "w") as f:
        json.dump(found, f, indent=1)
    for title, lines in found["programs"].items():
        print(f"== {title}: {len(lines)} collective(s)", *lines, sep="\n")


if __name__ == "__main__":
    main(sys.argv[1])
