"""A matmul of a float8-quantised norm output, as a training step uses it.

`project(h, w)` is `h @ w` for an `h` that gpu_ops.rms_norm_through_fp8
returned: the norm's float8 values times their per-tensor scale, read back.
Its forward quantises `w` to float8_e4m3fn with one scale (its largest
magnitude over 448) and multiplies in float32 terms, the pattern that XLA's
GPU compiler turns into one cuBLASLt float8 matmul on Hopper
(tools/fp8_matmul_hlo.py checks it); the result is in h's dtype. Its backward
is that of `h @ w` in h's dtype: rounding has no useful derivative, so the
gradients pass straight through both quantisations (h's on into the norm's
backward), and the backward's matmuls stay in bfloat16, as in float8
training recipes that keep a wider type for gradients.
"""

import jax
import jax.numpy as jnp

from gpu_ops import float8


def quantised_weight(w):
    """(values, scale): w in float8_e4m3fn with one float32 scale."""
    largest = jnp.max(jnp.abs(w.astype(jnp.float32)))
    scale = jnp.where(largest > 0, largest / float8.FLOAT8_MAX, 1.0)
    return float8.quantize_with(w, scale)[0], scale


@jax.custom_vjp
def project(h, w):
    values, scale = quantised_weight(w)
    product = jnp.matmul(h.astype(jnp.float32), float8.dequantize_with(values, scale))
    return product.astype(h.dtype)


def _forward(h, w):
    return project(h, w), (h, w)


def _backward(saved, dy):
    h, w = saved
    wide = jnp.float32  # sums in float32, as GPUs' bfloat16 matmuls accumulate
    dh = jnp.matmul(dy, w.T.astype(dy.dtype), preferred_element_type=wide)
    dw = jnp.einsum("...i,...o->io", h, dy.astype(h.dtype), preferred_element_type=wide)
    return dh.astype(h.dtype), dw.astype(w.dtype)


project.defvjp(_forward, _backward)
