"""Writing a decoding step's key or value row into a cache in place (the
handlers are in `kv_cache/`).

`write_row(target, cache, row, slot)` returns the cache with `row` in row
`slot` (read as `jax.lax.dynamic_update_slice` reads an index: a negative
slot counts from the end, and the slot is clamped into the cache).
Its result is aliased to `cache`: where the caller donates `cache`, XLA
hands the handler one buffer as both, and only the row is written.
"""

import jax
import jax.numpy as jnp
import numpy as np

from recipes import count


def register(library):
    """Register the handlers of `library`, built from `kv_cache/`."""
    library.register("WriteRowCpuHandler", "WriteRowCudaHandler")


def write_row(target, cache, row, slot, *, in_place=True):
    """`cache` (slots, width) float32 with `row` (width,) in row `slot`
    (an int32 scalar); `in_place=False` leaves out the aliasing, to show
    what it saves."""
    cache, row, slot = jnp.asarray(cache), jnp.asarray(row), jnp.asarray(slot)
    if cache.dtype != np.float32 or cache.ndim != 2 or cache.shape[0] == 0:
        raise TypeError(f"write_row: cache must be float32 (slots, width) with slots > 0, "
                        f"got {cache.dtype} {cache.shape}")
    if row.dtype != np.float32 or row.shape != cache.shape[1:]:
        raise TypeError(f"write_row: row must be float32 {cache.shape[1:]}, "
                        f"got {row.dtype} {row.shape}")
    if np.dtype(slot.dtype) != np.int32 or np.shape(slot) != ():
        raise TypeError(f"write_row: slot must be an int32 scalar, got {slot.dtype} "
                        f"{np.shape(slot)}")
    call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(cache.shape, cache.dtype),
                            input_output_aliases={0: 0} if in_place else None)
    return call(cache, row, slot)


def whole_cache_copies(library):
    """How many times the handlers that run here copied a whole cache."""
    return count(library, "KvCacheCopies")
