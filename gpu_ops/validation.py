"""Clear Python errors for arguments the kernels cannot take: each names the
public function called (`function`) and the argument."""

import math
import numbers

import jax
import jax.numpy as jnp

SUPPORTED_DTYPES = (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64)


def check_dtype(name, dtype, function):
    """dtype (anything jnp.dtype takes) as a dtype, or TypeError unless it is
    one the norm takes."""
    try:
        found = None if dtype is None else jnp.dtype(dtype)  # jnp.dtype(None) is float64
    except (TypeError, ValueError):
        found = None
    if found not in SUPPORTED_DTYPES:
        shown = repr(dtype) if found is None else found.name
        raise TypeError(
            f"{function}: {name} must be float16, bfloat16, float32 or float64, "
            f"got {shown}")
    return found


def check_rms_norm_args(x, weight, eps, function):
    """Raise TypeError/ValueError for bad arguments of `function` (the
    public function called, which the message names); return eps as a float."""
    check_dtype("x", x.dtype, function)
    check_dtype("weight", weight.dtype, function)
    if weight.ndim == 0:
        raise ValueError(f"{function}: weight must have at least one dimension")
    if weight.size == 0:
        raise ValueError(f"{function}: weight must not be empty, got shape {weight.shape}")
    if weight.ndim > x.ndim:
        raise ValueError(
            f"{function}: weight has more dimensions ({weight.ndim}) than x ({x.ndim})")
    if x.shape[x.ndim - weight.ndim:] != weight.shape:
        raise ValueError(
            f"{function}: weight shape {weight.shape} must equal the trailing "
            f"shape of x, got x shape {x.shape}")
    return check_eps(eps, function)


def check_out_dtype(out_dtype, x, weight, function):
    """The dtype of y as the primitives take it: None for the weight's (the
    default), else x's; TypeError or ValueError for anything else."""
    if out_dtype is None:
        return None
    found = check_dtype("out_dtype", out_dtype, function)
    if found == weight.dtype:
        return None
    if found != x.dtype:
        raise ValueError(f"{function}: out_dtype must be x's dtype ({x.dtype}) or the "
                         f"weight's ({weight.dtype}), got {found.name}")
    return found


def check_eps(eps, function):
    """Raise TypeError/ValueError unless eps is a real number, finite and >= 0;
    return it as a float."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(
            f"{function}: eps must be a Python or NumPy real number (it is a "
            f"static attribute of the custom call), got {type(eps).__name__}")
    try:
        value, shown = float(eps), eps
    except OverflowError:
        value, shown = math.inf, "an integer beyond float64's range"
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{function}: eps must be a finite number >= 0, got {shown}")
    return value


def check_residual(x, residual, function):
    """residual as an array, or TypeError/ValueError unless it has x's dtype and shape."""
    residual = jnp.asarray(residual)
    if residual.dtype != x.dtype:
        raise TypeError(f"{function}: residual must have x's dtype {x.dtype}, got "
                        f"{residual.dtype}")
    if residual.shape != x.shape:
        raise ValueError(f"{function}: residual must have x's shape {x.shape}, got "
                         f"{residual.shape}")
    return residual


def check_float8_weight(weight, group, function):
    """ValueError unless the weight is one axis of a multiple of `group` values."""
    if weight.ndim != 1 or weight.size % group or weight.size == 0:
        raise ValueError(f"{function}: weight must have one dimension, a multiple of "
                         f"{group} long (the groups that share a scale), got shape "
                         f"{weight.shape}")


def check_read_back_dtype(dtype, default):
    """The dtype rms_norm_through_fp8 reads its float8 values back in:
    `default` for None, else one of the dtypes the norm takes (TypeError
    otherwise)."""
    if dtype is None:
        return jnp.dtype(default)
    return check_dtype("dtype", dtype, "rms_norm_through_fp8")


def check_float8_scale(scale, function):
    """The float8 forward's given scale, as a float32 scalar array: a real
    number or a floating-point scalar array, finite and positive where its
    value is known (TypeError or ValueError otherwise)."""
    if isinstance(scale, bool) or not (isinstance(scale, numbers.Real)
                                       or hasattr(scale, "dtype")):
        raise TypeError(f"{function}: scale must be a real number or a floating-point "
                        f"scalar array, got {type(scale).__name__}")
    if not hasattr(scale, "dtype"):
        scale = float(scale)
    elif not jnp.issubdtype(scale.dtype, jnp.floating):
        raise TypeError(f"{function}: scale must be floating-point, got {scale.dtype}")
    scale = jnp.asarray(scale, jnp.float32)
    if scale.shape != ():
        raise ValueError(f"{function}: scale must be one number for the whole tensor, "
                         f"got shape {scale.shape}")
    if not isinstance(scale, jax.core.Tracer):
        value = float(scale)
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{function}: scale must be finite and positive, got {value}")
    return scale


def check_pallas_gpus():
    """Raise NotImplementedError where a local GPU is older than Mosaic GPU's sm_90."""
    if jax.default_backend() != "gpu":
        return
    for device in jax.local_devices():
        capability = getattr(device, "compute_capability", None)
        if capability is not None and float(capability) < 9.0:
            raise NotImplementedError(
                f"rms_norm: implementation='pallas' compiles its kernels with Mosaic "
                f"GPU, which needs sm_90 or newer; {device.device_kind} is "
                f"sm_{capability.replace('.', '')}: use implementation='ffi'")


def check_implementation(implementation, known, function):
    """Raise TypeError/ValueError unless `implementation` names one of `known`."""
    if not isinstance(implementation, str):
        raise TypeError(f"{function}: implementation must be a string, got "
                        f"{type(implementation).__name__}")
    if implementation not in known:
        raise ValueError(f"{function}: implementation must be one of {sorted(known)}, "
                         f"got {implementation!r}")
    return implementation


def check_float8_input_weight(weight, group, function):
    """TypeError/ValueError unless the weight suits the kernels of a float8
    input: float16, bfloat16 or float32, one axis of a multiple of `group`."""
    if weight.dtype not in (jnp.float16, jnp.bfloat16, jnp.float32):
        raise TypeError(f"{function}: weight must be float16, bfloat16 or float32, "
                        f"got {weight.dtype}")
    check_float8_weight(weight, group, function)


def check_float8_input(values, scales, weight, eps, group):
    """Raise TypeError/ValueError unless float8 `values` with their float32
    `scales` (one per `group` values of a row) fit `weight`; return eps as a
    float."""
    if values.dtype != jnp.float8_e4m3fn:
        raise TypeError(f"rms_norm_from_fp8: values must be float8_e4m3fn, got {values.dtype}")
    if scales.dtype != jnp.float32:
        raise TypeError(f"rms_norm_from_fp8: scales must be float32, got {scales.dtype}")
    check_float8_input_weight(weight, group, "rms_norm_from_fp8")
    if values.ndim == 0 or values.shape[-1] != weight.shape[0]:
        raise ValueError(f"rms_norm_from_fp8: values' last axis must be the weight's "
                         f"length {weight.shape[0]}, got shape {values.shape}")
    expected = (*values.shape[:-1], weight.shape[0] // group)
    if scales.shape != expected:
        raise ValueError(f"rms_norm_from_fp8: scales must have shape {expected} (one per "
                         f"{group} values of a row), got {scales.shape}")
    return check_eps(eps, "rms_norm_from_fp8")
