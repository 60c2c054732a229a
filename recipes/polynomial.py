"""A polynomial activation whose coefficients are an array attribute and
whose clip range is a dictionary attribute, over float32 and bfloat16 (the
handlers are in `polynomial/`).

`polynomial(target, x, coefficients, low, high)` is
`clip(c0 + c1 x + c2 x^2 + ..., low, high)`, computed in float32.
"""

import jax
import jax.numpy as jnp
import numpy as np

DTYPES = (jnp.float32, jnp.bfloat16)
# How far from polynomial_reference a result may be, relative and absolute:
# a GPU fuses each multiply and add of Horner's rule into one rounding, and
# a float32 result then differs in its last bits (bfloat16's rounding hides it).
TOLERANCE = {jnp.float32: 1e-6, jnp.bfloat16: 2.0**-8}
MAX_COEFFICIENTS = 16  # the handlers pass them to a GPU kernel by value


def register(library):
    """Register the handlers of `library`, built from `polynomial/`."""
    library.register("PolynomialCpuHandler", "PolynomialCudaHandler")


def attributes(coefficients, low, high):
    """The call's attributes, checked: a float32 array and a dictionary of
    two float64 values (the types the handlers bind)."""
    coefficients = np.asarray(coefficients, np.float32)
    if coefficients.ndim != 1 or not 1 <= coefficients.size <= MAX_COEFFICIENTS:
        raise ValueError(f"polynomial: coefficients must be 1 to {MAX_COEFFICIENTS} numbers, "
                         f"got shape {coefficients.shape}")
    if not low <= high:
        raise ValueError(f"polynomial: low must not exceed high, got {low} and {high}")
    return {"coefficients": coefficients, "clip": {"low": np.float64(low), "high": np.float64(high)}}


def checked_x(x):
    """x as an array of one of DTYPES, or a TypeError."""
    x = jnp.asarray(x)
    if x.dtype not in DTYPES:
        raise TypeError(f"polynomial: x must be float32 or bfloat16, got {x.dtype}")
    return x


def polynomial(target, x, coefficients, low=-np.inf, high=np.inf):
    """`clip(sum(c[k] * x**k), low, high)` elementwise, through `target`."""
    x = checked_x(x)
    call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(x.shape, x.dtype))
    return call(x, **attributes(coefficients, low, high))


def polynomial_reference(x, coefficients, low=-np.inf, high=np.inf):
    """The same in jax.numpy, in float32, for the tests and the chapter."""
    y = jnp.zeros(x.shape, jnp.float32)
    for c in np.asarray(coefficients, np.float32)[::-1]:
        y = y * x.astype(jnp.float32) + c
    return jnp.clip(y, low, high).astype(x.dtype)
