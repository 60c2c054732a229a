"""Float8 (e4m3fn) values with a float32 scale per group of 128 values of a
row: the layout of :func:`gpu_ops.rms_norm_fp8`'s results, and the same
quantisation in jax.numpy.

A group's scale is its largest magnitude over 448, float8_e4m3fn's largest
finite value (1 for a group of zeros), and its values are the group divided
by the scale, rounded to the nearest float8_e4m3fn value: a value v reads
back as ``float(q) * scale``, within half a float8 step of v (a relative
2**-4 for normal values).

With a scale given for the whole tensor (delayed scaling: the scale comes
from the largest magnitudes of earlier steps), every value is divided by it
and rounded, saturating at +-448, and the tensor's own largest magnitude is
returned for the next step's scale: :func:`quantize_with`.
"""

import jax
import jax.numpy as jnp

GROUP = 128  # values of a row that share a scale
FLOAT8_MAX = 448.0


def _grouped(a):
    return a.reshape(*a.shape[:-1], a.shape[-1] // GROUP, GROUP)


def quantize(y):
    """(values, scales) of y (last axis a multiple of GROUP), computed in
    float32 with jnp: the quantisation the kernels apply to the norm's output."""
    groups = _grouped(y.astype(jnp.float32))
    largest = jnp.max(jnp.abs(groups), axis=-1)
    scales = jnp.where(largest > 0, largest / FLOAT8_MAX, 1.0).astype(jnp.float32)
    values = jnp.clip(groups / scales[..., None], -FLOAT8_MAX, FLOAT8_MAX)
    return values.astype(jnp.float8_e4m3fn).reshape(y.shape), scales


def _widened(values):
    """float8 values in float32, as they were rounded. The barrier keeps XLA
    from folding a conversion to float8 and this one back into nothing: its
    GPU compiler, allowed excess precision by default, removes such chains of
    conversions (its simplify-fp-conversions pass), and with them the
    rounding to float8 that they stand for."""
    return jax.lax.optimization_barrier(values).astype(jnp.float32)


def dequantize(values, scales, dtype=jnp.float32):
    """The values that (values, scales) stand for, in `dtype`."""
    groups = _grouped(_widened(values)) * scales[..., None]
    return groups.reshape(values.shape).astype(dtype)


def dequantize_with(values, scale, dtype=jnp.float32):
    """The values that float8 `values` quantised with one given `scale` (a
    float32 that broadcasts against them) stand for, in `dtype`."""
    return (_widened(values) * scale).astype(dtype)


def group_largest(y):
    """The largest magnitude of each group of y, in float32."""
    return jnp.max(jnp.abs(_grouped(y.astype(jnp.float32))), axis=-1)


def quantize_with(y, scale):
    """(values, amax) of y quantised with one given float32 `scale`: y / scale
    rounded to float8_e4m3fn (saturating at +-448), and y's largest magnitude."""
    y32 = y.astype(jnp.float32)
    values = jnp.clip(y32 / scale, -FLOAT8_MAX, FLOAT8_MAX).astype(jnp.float8_e4m3fn)
    return values, jnp.max(jnp.abs(y32))


def straight_through(v):
    """v quantised and read back, in float32, with v's own gradient (the
    straight-through convention). In float32 v + (read_back - v) is
    read_back exactly: the two are within a sixteenth of each other, so
    their difference is exact."""
    v32 = v.astype(jnp.float32)
    return v32 + jax.lax.stop_gradient(dequantize(*quantize(v)) - v32)
