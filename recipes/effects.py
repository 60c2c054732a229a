"""An operation that logs its tag: what XLA does with a call whose result
nobody uses, and in what order it runs such calls (the handlers are in
`effects/`).

`log_event(target, x, tag, after)` logs `tag` when XLA runs it, after `x`
and `after` are computed, and returns `tag` as an int32 scalar;
`events(library)` reads the log. Without `has_side_effect=True`, XLA
removes a call whose result is not used; with it, XLA keeps the call but
orders it only by its operands, so a call that must follow another takes
the other's result as `after`.
"""

import ctypes

import jax
import jax.numpy as jnp
import numpy as np

from recipes import running


def register(library):
    """Register the handlers of `library`, built from `effects/`."""
    library.register("LogEventCpu", "LogEventCuda")


def log_event(target, x, tag, after=None, *, has_side_effect=True):
    """Log `tag` (an int) when XLA runs the call, after `x` and `after`
    (an earlier call's result, or None) are computed; return `tag`.
    `has_side_effect=False` leaves out the mark, to show what it keeps."""
    if not isinstance(tag, int) or not -2**31 <= tag < 2**31:
        raise TypeError(f"log_event: tag must be an int32 integer, got {tag!r}")
    after = jnp.int32(0) if after is None else jnp.asarray(after)
    if np.dtype(after.dtype) != np.int32 or np.shape(after) != ():
        raise TypeError(f"log_event: after must be an earlier call's int32 result, "
                        f"got {after.dtype} {np.shape(after)}")
    call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct((), np.int32),
                            has_side_effect=has_side_effect)
    return call(x, after, tag=np.int32(tag))


def events(library):
    """The tags logged so far by the handlers that run here, and clear them."""
    handlers = running(library)
    handlers.EventCount.restype = handlers.EventAt.restype = ctypes.c_int64
    handlers.EventAt.argtypes = (ctypes.c_int64,)
    logged = [handlers.EventAt(i) for i in range(handlers.EventCount())]
    handlers.ClearEvents()
    return logged
