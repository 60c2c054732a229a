"""Forward and backward over a few shapes and dtypes, for compute-sanitizer.

Run as: compute-sanitizer --tool memcheck python tools/sanitizer_workload.py
"""

import jax
import jax.numpy as jnp

import gpu_ops

# (shape, x dtype, weight dtype): together they take every kernel path, in
# both directions, on an H100 (tests/test_kernel_plans.py checks it with the
# planner), including the edges of each: mixed dtypes and rows of part vectors
# (the general kernels); short rows (lanes past a row's end, a float32 weight
# of bfloat16 x, backward blocks that go through the rows more than once); a
# row over a cluster's column slices (a slice's last lanes past the row's
# end); up to 64 rows in a block a row beside blocks of columns
# (the last of one vector column); few rows; more rows than the GPU holds
# blocks of one row for (blocks of several rows, and backward teams that loop
# through their ring); 16-bit rows taking a 1024-thread block each; rows over
# a cluster of blocks; and rows longer than a cluster holds (the general
# kernels), a block's last part of a row cut short. A float32 weight of 16-bit
# x also takes the column slices, rows and columns, few rows, rows a block
# holds and 16-bit rows of 16,384 (the backward's in clusters).
CASES = [
    ((3, 1), jnp.float32, jnp.float32),
    ((5, 7, 33), jnp.bfloat16, jnp.float32),
    ((300, 1000), jnp.float16, jnp.bfloat16),
    ((2, 4, 512, 4), jnp.bfloat16, jnp.bfloat16),
    ((0, 16), jnp.float32, jnp.float32),
    ((1000, 128), jnp.float16, jnp.float16),
    ((7, 200), jnp.float32, jnp.float32),
    ((40_009, 64), jnp.bfloat16, jnp.float32),
    ((1, 13600), jnp.bfloat16, jnp.bfloat16),
    ((8, 8192), jnp.float32, jnp.float32),
    ((67, 1024), jnp.bfloat16, jnp.bfloat16),
    ((9, 2048), jnp.float32, jnp.float32),
    ((40_009, 1024), jnp.bfloat16, jnp.bfloat16),
    ((3001, 4096), jnp.float32, jnp.float32),
    ((67, 16384), jnp.bfloat16, jnp.bfloat16),
    ((301, 16384), jnp.bfloat16, jnp.bfloat16),
    ((67, 65536), jnp.bfloat16, jnp.bfloat16),
    ((5, 262144), jnp.bfloat16, jnp.bfloat16),
    ((7, 1_000_000), jnp.float16, jnp.float16),
    ((3, 131080), jnp.float32, jnp.float32),
    ((1, 13600), jnp.bfloat16, jnp.float32),
    ((40_009, 1024), jnp.float16, jnp.float32),
    ((301, 16384), jnp.bfloat16, jnp.float32),
    ((37, 12296), jnp.bfloat16, jnp.float32),
]


# The forward with a residual add: few rows, with a float32 weight too; rows
# a block holds, more rows than blocks and a row's last vectors cut short;
# and the general kernel for a part vector, long rows and no rows.
RESIDUAL_CASES = [
    ((67, 1024), jnp.bfloat16, jnp.bfloat16),
    ((4099, 1024), jnp.float32, jnp.float32),
    ((67, 5000), jnp.bfloat16, jnp.bfloat16),
    ((3, 5), jnp.float32, jnp.float32),
    ((5, 262144), jnp.bfloat16, jnp.bfloat16),
    ((0, 16), jnp.float16, jnp.float16),
    ((9, 4096), jnp.bfloat16, jnp.float32),
]


# The forward quantised to float8: one group, rows a block sweeps several
# times, no rows, mixed dtypes.
FP8_CASES = [
    ((5, 128), jnp.bfloat16, jnp.bfloat16),
    ((3, 262144), jnp.float32, jnp.float32),
    ((0, 256), jnp.float16, jnp.float16),
    ((9, 4096), jnp.bfloat16, jnp.float32),
]

# The norm of a float8 input, forward and backward: one group, rows a block
# sweeps several times, more rows than the backward's partial rows, no rows,
# each weight dtype.
FROM_FP8_CASES = [
    ((5, 128), jnp.bfloat16),
    ((3, 262144), jnp.float32),
    ((3000, 1024), jnp.float16),
    ((0, 256), jnp.bfloat16),
]


def main():
    for shape, x_dtype, w_dtype in CASES:
        x = jax.random.normal(jax.random.key(0), shape, jnp.float32).astype(x_dtype)
        weight = jnp.ones(shape[-1:], w_dtype)
        y, pullback = jax.vjp(gpu_ops.rms_norm, x, weight)
        dx, dweight = pullback(jnp.ones_like(y))
        jax.block_until_ready((y, dx, dweight))
        print("ok", shape, jnp.dtype(x_dtype).name, jnp.dtype(w_dtype).name, flush=True)
    for shape, x_dtype, w_dtype in RESIDUAL_CASES:
        x = jax.random.normal(jax.random.key(1), shape, jnp.float32).astype(x_dtype)
        y, total = gpu_ops.rms_norm(x, jnp.ones(shape[-1:], w_dtype), residual=x)
        jax.block_until_ready((y, total))
        print("ok, with a residual", shape, jnp.dtype(x_dtype).name, jnp.dtype(w_dtype).name,
              flush=True)

    for shape, x_dtype, w_dtype in FP8_CASES:
        x = jax.random.normal(jax.random.key(2), shape, jnp.float32).astype(x_dtype)
        weight = jnp.ones(shape[-1:], w_dtype)
        jax.block_until_ready(gpu_ops.rms_norm_fp8(x, weight))
        jax.block_until_ready(gpu_ops.rms_norm_fp8(x, weight, residual=x))
        jax.block_until_ready(gpu_ops.rms_norm_fp8(x, weight, scale=0.01))
        jax.block_until_ready(gpu_ops.rms_norm_fp8(x, weight, residual=x, scale=0.01))
        print("ok, quantised (with a residual, a given scale)", shape,
              jnp.dtype(x_dtype).name, jnp.dtype(w_dtype).name, flush=True)

    for shape, w_dtype in FROM_FP8_CASES:
        x = jax.random.normal(jax.random.key(3), shape, jnp.float32).astype(w_dtype)
        weight = jnp.ones(shape[-1:], w_dtype)
        y, pullback = jax.vjp(gpu_ops.rms_norm_through_fp8_input, x, weight)
        jax.block_until_ready((y, *pullback(jnp.ones_like(y))))
        print("ok, from float8", shape, jnp.dtype(w_dtype).name, flush=True)


if __name__ == "__main__":
    main()
