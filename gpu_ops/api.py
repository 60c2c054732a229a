"""The public entry point, :func:`rms_norm` (quantised.py and from_fp8.py
have the float8 ones; implementations.py what they share)."""

from gpu_ops.implementations import (IMPLEMENTATIONS, WITH_RESIDUAL, checked_operands,
                                     on_their_devices)
from gpu_ops.validation import check_out_dtype


def rms_norm(x, weight, eps=1e-5, *, residual=None, out_dtype=None,
             implementation="ffi"):
    """RMS-normalise ``x`` over its trailing ``weight.ndim`` axes and scale by ``weight``.

    ``y = x / sqrt(mean(x**2 over those axes) + eps) * weight``

    With ``residual``, the residual stream of a transformer block: returns
    ``(rms_norm(x + residual, weight, eps), x + residual)``, the sum rounded
    to x's dtype, both from one pass of the CUDA or C++ kernel (with the
    "hijax" and "pallas" implementations XLA adds the sum first).

    Args:
      x: array of float16, bfloat16, float32 or float64.
      weight: array of one of those dtypes whose shape equals the trailing
        shape of ``x``. It may differ from x's dtype: on a GPU, float16 or
        bfloat16 x with a float32 weight runs the fast CUDA kernels on the
        rows of models (up to 16,384 values), as one dtype does; other
        pairs, float64 and rows too long for the fast kernels run the
        general ones, slower.
      eps: finite number >= 0 added to the mean square.
      residual: None, or an array of x's shape and dtype added to x first.
      out_dtype: y's dtype: None or the weight's dtype (the default), or x's.
        A model that keeps a float32 weight for bfloat16 activations takes
        y back in bfloat16 for its next matmul: with ``out_dtype=x.dtype``
        the kernel writes it so, computed in float32 and rounded once, where
        converting the float32 y would take a second pass.
      implementation: "ffi" (explicit JAX primitives with their rules,
        lowered to the C++ and CUDA kernels through XLA's FFI) or "hijax"
        (one ``jax.experimental.hijax`` class calling the same kernels); or
        "pallas", the same primitives lowered to kernels written in Pallas
        (Mosaic GPU on NVIDIA GPUs of sm_90 or newer, Pallas' interpret
        mode on CPUs). A Pallas kernel's grid is
        its number of rows, so "pallas" needs concrete shapes: exporting it
        with a symbolic dimension of x raises NotImplementedError.

    Returns:
      An array of ``x``'s shape and ``out_dtype`` (with a residual, that and
      ``x + residual``, of x's shape and dtype). Works under ``jit``,
      ``grad`` and forward mode (``jvp``, ``jacfwd``, ``linearize``),
      ``vmap``, with inputs sharded over automatic or explicit mesh
      axes, and inside ``shard_map``; the CUDA kernels run on NVIDIA GPUs and
      a C++ implementation on CPUs.
    """
    operands, eps, name = checked_operands(x, weight, eps, residual, implementation,
                                           IMPLEMENTATIONS, "rms_norm")
    out_dtype = check_out_dtype(out_dtype, *operands[:2], "rms_norm")
    defined = IMPLEMENTATIONS[name] if residual is None else WITH_RESIDUAL[name]
    return on_their_devices(defined, operands, eps, out_dtype)
