"""A matmul of a float8-quantised norm output, as a training step uses it.

`project(h, weight)` is `h @ weight["w"]` for an `h` that
gpu_ops.rms_norm_through_fp8 returned in float32 (``dtype=jnp.float32``):
the norm's float8 values times their per-tensor scale, read back exactly.
`weight` is the matrix with its float8 scale, ``with_scale(w)``; a training
step passes it in and computes the next step's scale from the updated
matrix (``with_scale(weight["w"])``), as float8 recipes do, because XLA's GPU
compiler makes a float8 matmul only of operands whose scales it does not
compute itself. The forward quantises the matrix to float8_e4m3fn with that
scale and multiplies the two read-backs in float32, the pattern that XLA
turns into one cuBLASLt float8 matmul on Hopper (tools/fp8_matmul_hlo.py
checks it; read back in bfloat16, XLA's Triton GEMM fusion takes the dot
before that rewrite can); the result is in the matrix's dtype. Its backward
is that of `h @ w` in w's dtype: rounding has no useful derivative, so the
gradients pass straight through both quantisations (h's, in float32, on into
the norm's backward), the scale gets none, and the backward's matmuls stay
in bfloat16, as in float8 training recipes that keep a wider type for
gradients. It keeps h in w's dtype for them, not in float32.
"""

import re

import jax
import jax.numpy as jnp

from gpu_ops import float8

#: A float8 matmul in XLA's compiled HLO for NVIDIA GPUs (one per such line).
FP8_MATMUL = re.compile(r'custom_call_target="__cublas\$lt\$matmul\$f8"')


def weight_scale(w):
    """w's float8 scale: its largest magnitude over 448 (1 for zeros), in float32."""
    largest = jnp.max(jnp.abs(w.astype(jnp.float32)))
    return jnp.where(largest > 0, largest / float8.FLOAT8_MAX, 1.0)


def quantised_weight(w):
    """(values, scale): w in float8_e4m3fn with one float32 scale."""
    scale = weight_scale(w)
    return float8.quantize_with(w, scale)[0], scale


def with_scale(w):
    """The weight `project` takes: {"w": w, "scale": its float8 scale}."""
    return {"w": w, "scale": weight_scale(w)}


def _check(h):
    if h.dtype != jnp.float32:
        raise TypeError(f"project: h must be the norm's float32 read-back, got {h.dtype}")


@jax.custom_vjp
def project(h, weight):
    _check(h)
    w, scale = weight["w"], weight["scale"]
    values = float8.quantize_with(w, scale)[0]
    return jnp.matmul(h, float8.dequantize_with(values, scale)).astype(w.dtype)


def _forward(h, weight):
    return project(h, weight), (h.astype(weight["w"].dtype), weight)


def _backward(saved, dy):
    h, weight = saved
    w = weight["w"]
    wide = jnp.float32  # sums in float32, as GPUs' bfloat16 matmuls accumulate
    dh = jnp.matmul(dy, w.T, preferred_element_type=wide)
    dw = jnp.einsum("...i,...o->io", h, dy, preferred_element_type=wide)
    return dh, {"w": dw.astype(w.dtype), "scale": jnp.zeros_like(weight["scale"])}


project.defvjp(_forward, _backward)
