"""Small operations, each showing one FFI feature beyond chapters 1 to 7.

The book's Recipes part builds each from a cell: the C++ and CUDA handlers
of a folder here, compiled by `exercises.build.build_library`, and the
module of the same name, which registers them and calls them from JAX.
"""

import ctypes

import jax


def running(library):
    """`library`'s handlers that run here: the CUDA ones on a GPU, the CPU
    ones elsewhere."""
    return library.cuda if jax.default_backend() == "gpu" else library.cpu


def count(library, function):
    """What the counting function `function` of the handlers that run here
    returns."""
    counter = getattr(running(library), function)
    counter.restype = ctypes.c_int64
    return counter()
