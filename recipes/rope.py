"""Rotary position embedding whose frequency table is state made once per
executable (the handlers are in `rope/`).

`register(library)` registers the table's type and the two-stage handler:
instantiate makes the table when XLA loads an executable, execute reads it
on every call. `rope(target, x, positions)` calls it.
"""

import ctypes

import jax
import numpy as np

from recipes import count

MAX_HEAD_DIM = 256  # the handlers' table holds 128 frequencies


def _capsule(pointer):
    """A capsule holding a data pointer, as `register_ffi_type` takes it
    (`jax.ffi.pycapsule` wraps function pointers, not data)."""
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, (ctypes.c_void_p, ctypes.c_char_p,
                                                   ctypes.c_void_p)
    return new(pointer, None, None)


def _type_registration(library):
    for function in (library.RopeTableTypeId, library.RopeTableTypeInfo):
        function.restype = ctypes.c_void_p
    return {"type_id": _capsule(library.RopeTableTypeId()),
            "type_info": _capsule(library.RopeTableTypeInfo())}


def register(library):
    """Register the table's type and the handlers of `library` (built from
    `rope/`) under `library.name`, for each platform it was built for."""
    # A type registered before JAX's backend starts makes the start fail,
    # so start it first: jax.devices() does.
    jax.devices()
    for platform, handlers, execute in (("cpu", library.cpu, "RopeExecuteCpu"),
                                        ("CUDA", library.cuda, "RopeExecuteCuda")):
        if handlers is None:  # nvcc did not build the CUDA handlers
            continue
        jax.ffi.register_ffi_type(f"{library.name}_table", _type_registration(handlers),
                                  platform=platform)
        jax.ffi.register_ffi_target(
            library.name, {"instantiate": jax.ffi.pycapsule(handlers.RopeInstantiate),
                           "execute": jax.ffi.pycapsule(getattr(handlers, execute))},
            platform=platform)


def tables_made(library):
    """How many tables the handlers that run here have made."""
    return count(library, "RopeTablesMade")


def rope(target, x, positions, base=10000.0):
    """Turn each pair of values of `x` (tokens, heads, head_dim), float32,
    by its token's position (`positions`, int32, one per token) times the
    pair's frequency, `base ** (-2 i / head_dim)`."""
    x, positions = jax.numpy.asarray(x), jax.numpy.asarray(positions)
    if x.dtype != np.float32 or x.ndim != 3:
        raise TypeError(f"rope: x must be a float32 array (tokens, heads, head_dim), "
                        f"got {x.dtype} {x.shape}")
    head_dim = x.shape[2]
    if head_dim % 2 or not 2 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"rope: x's head_dim must be even, 2 to {MAX_HEAD_DIM}, got {head_dim}")
    if positions.dtype != np.int32 or positions.shape != x.shape[:1]:
        raise TypeError(f"rope: positions must be int32 of shape {x.shape[:1]}, "
                        f"got {positions.dtype} {positions.shape}")
    call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(x.shape, x.dtype))
    return call(x, positions, head_dim=np.int64(head_dim), base=np.float64(base))


def rope_reference(x, positions, base=10000.0):
    """The same in jax.numpy, for the tests and the chapter."""
    head_dim = x.shape[-1]
    inverse = np.float32(base ** (-np.arange(0, head_dim, 2) / head_dim))
    angle = positions.astype(np.float32)[:, None, None] * inverse
    a, b = x[..., 0::2], x[..., 1::2]
    c, s = jax.numpy.cos(angle), jax.numpy.sin(angle)
    return jax.numpy.stack([a * c - b * s, a * s + b * c], axis=-1).reshape(x.shape)
