"""Whether XLA runs a matmul of rms_norm_fp8's output as a float8 matmul.

    python tools/fp8_matmul_hlo.py --out FILE [--rows N] [--d-model N] [--d-out N]

Compiles, for the default backend, a function that normalises and quantises
x with a given scale (``rms_norm_fp8(..., scale=)``) and multiplies the
values, each times its scale, by a weight matrix quantised the same way: the
pattern XLA's GPU compiler rewrites into a cuBLASLt float8 matmul (a ``dot``
of two float8 arrays, each converted and multiplied by a scalar). Writes the
device, JAX version, commit and date, the custom calls of the compiled HLO,
whether one is a float8 matmul, and the HLO line of the matmul, to FILE;
and the same for the route a training step takes (``through_fp8``): the
differentiable ``rms_norm_through_fp8``, read back in float32, and
benchmarks/fp8_projection.py's matmul, which quantises its weight itself
with the scale it is given with it. On a CPU the matmuls stay plain
``dot``s.
"""

import argparse
import datetime
import json
import pathlib
import re
import sys

import jax
import jax.numpy as jnp

import gpu_ops
from gpu_ops import float8

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "benchmarks"))
import fp8_projection  # noqa: E402
from rms_norm_bench import commit  # noqa: E402  (GPU_OPS_COMMIT, else git's HEAD)

#: A matmul in compiled HLO: a dot, or a cuBLAS call of any type.
MATMUL = re.compile(r'\bdot\(|custom_call_target="__cublas')


def normalise_and_project(x, weight, w8, w_scale, x_scale):
    """y = rms_norm(x, weight) in float8 with x_scale, times w8 (float8, w_scale).

    The operands are read back in float32: read back in bfloat16, XLA's
    Triton GEMM fusion takes the dot, with the conversions, before the
    float8 rewrite can (JAX 0.11 on an H100 and an H200).
    """
    values, amax = gpu_ops.rms_norm_fp8(x, weight, scale=x_scale)
    h = values.astype(jnp.float32) * x_scale
    w = w8.astype(jnp.float32) * w_scale
    return jnp.dot(h, w).astype(jnp.bfloat16), amax


def through_and_project(x, weight, w, x_scale):
    """The training step's route: y = rms_norm_through_fp8(x, weight) with
    x_scale, times w (fp8_projection.with_scale's form, quantised by
    fp8_projection.project)."""
    y, amax = gpu_ops.rms_norm_through_fp8(x, weight, scale=x_scale, dtype=jnp.float32)
    return fp8_projection.project(y, w), amax


def compiled_hlo(rows, d_model, d_out):
    """The optimised HLOs of normalise_and_project and through_and_project
    on the default backend."""
    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (rows, d_model), jnp.bfloat16)
    weight = jnp.ones((d_model,), jnp.bfloat16)
    w = jax.random.normal(kw, (d_model, d_out), jnp.float32) / d_model ** 0.5
    w8, w_scale = fp8_projection.quantised_weight(w)
    x_scale = jnp.float32(8 / float8.FLOAT8_MAX)
    given = jax.jit(normalise_and_project).lower(x, weight, w8, w_scale, x_scale)
    w_with_scale = fp8_projection.with_scale(w.astype(jnp.bfloat16))
    through = jax.jit(through_and_project).lower(x, weight, w_with_scale, x_scale)
    return given.compile().as_text(), through.compile().as_text()


def summary(hlo):
    """The custom calls of `hlo`, whether it runs a float8 matmul, and its
    matmuls' lines."""
    targets = sorted(set(re.findall(r'custom_call_target="([^"]+)"', hlo)))
    matmuls = [line.strip() for line in hlo.splitlines() if MATMUL.search(line)]
    return {"custom_call_targets": targets,
            "fp8_matmul": bool(fp8_projection.FP8_MATMUL.search(hlo)),
            "matmul_lines": matmuls}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--d-model", type=int, default=2048)
    parser.add_argument("--d-out", type=int, default=2048)
    args = parser.parse_args(argv)
    for name in ("rows", "d_model", "d_out"):
        if getattr(args, name) < 16 or getattr(args, name) % 16:
            parser.error(f"--{name.replace('_', '-')} must be a positive multiple of 16 "
                         "(float8 matmuls take such sizes)")
    if args.d_model % float8.GROUP:
        parser.error(f"--d-model must be a multiple of {float8.GROUP}")
    record = {"device": jax.devices()[0].device_kind, "jax_version": jax.__version__,
              "commit": commit(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "shape": {"rows": args.rows, "d_model": args.d_model, "d_out": args.d_out}}
    given, through = compiled_hlo(args.rows, args.d_model, args.d_out)
    record |= {**summary(given), "through_fp8": summary(through)}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for route, found in (("given values", record), ("through_fp8", record["through_fp8"])):
        print(f"{record['device']}, {route}: float8 matmul: {found['fp8_matmul']}; "
              f"custom calls: {', '.join(found['custom_call_targets'])}")


if __name__ == "__main__":
    sys.exit(main())
