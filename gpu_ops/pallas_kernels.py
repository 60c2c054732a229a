"""RMS norm's forward and backward kernels written in Pallas (Mosaic GPU).

The same maths as the CUDA kernels, in JAX's kernel language, with the
lowering JAX recommends for Hopper: ``plgpu.kernel`` compiles each function
below with Mosaic GPU on an NVIDIA GPU (sm_90 or newer). Elsewhere the same
kernel bodies run in Pallas' interpret mode (``interpret=True``), which
turns them into XLA operations. Its GPU interpret mode, which simulates
shared memory and threads, keeps one global state for every kernel and
orders its host callbacks with an effect token, which primitives lowered
inside ``custom_partitioning`` and ``vmap`` cannot carry; these kernels use
neither shared memory nor barriers, so the plain interpreter runs them.

Each kernel sees x as rows (its leading axes flattened) of ``row_length``
values (the weight's axes flattened), every row a block of one warpgroup
(128 threads). A row is read in chunks whose register layout gives each
thread whole 16-byte vectors, as the CUDA kernels' loads do:

- forward: add up a row's squares, then write ``y = weight * x * inv_rms``.
  A row of at most ``_HELD_CHUNKS`` chunks stays in registers between the
  two; a longer one is read twice.
- backward: the row's ``mean(dy * weight * x)``, then ``dx``, in the same
  way; the weight gradient, a sum over rows, comes from a second kernel in
  which each block adds up one chunk of columns over a share of the rows,
  and XLA adds up those shares.

Rows whose length is not a multiple of 128 are padded with zeros, which add
nothing to a sum of squares, and the padding is cut off the results.
"""

import functools
import math
import typing

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from gpu_ops.primitives import inv_rms_dtype, leading_shape

_LANES = 128  # threads of a warpgroup: a chunk gives each the same number of values
_HELD_CHUNKS = 8  # a row of at most this many chunks is read once
_ROW_SHARES = 128  # blocks adding up each chunk of the weight gradient
# A Mosaic GPU kernel reads its block index as the index along a named axis
# (jax.lax.axis_index). Inside shard_map or custom_partitioning the mesh's
# axes are named too, and a mesh axis of the same name wins: the kernel would
# read the device's index instead, and every block would work on the same
# row. The grid's names are this module's own, so that no mesh takes them.
_GRID_NAMES = ("gpu_ops.pallas_kernels.grid0", "gpu_ops.pallas_kernels.grid1")


def _chunk_length(row_length, dtype):
    """The longest chunk of a (padded) row that gives each thread at most 16 bytes."""
    per_thread = 16 // jnp.dtype(dtype).itemsize
    while row_length % (_LANES * per_thread):
        per_thread //= 2
    return _LANES * per_thread


def _padded(a, length):
    """`a` with its last axis padded with zeros to `length`."""
    extra = length - a.shape[-1]
    return a if extra == 0 else jnp.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, extra)])


def _result(operand, shape, dtype):
    """A kernel result's type, with `operand`'s manual-axis type, which JAX
    requires of a kernel's results inside ``shard_map``."""
    return jax.ShapeDtypeStruct(shape, dtype,
                                manual_axis_type=jax.typeof(operand).manual_axis_type)


def _kernel(out_type, grid, on_cpu):
    """A decorator making `body(block, *refs)` a kernel over `grid`.

    ``block(i)`` is the index of the running block along grid axis i. On a
    GPU the kernel is a Mosaic GPU kernel (``plgpu.kernel``, whose grid axes
    are named); elsewhere the same body runs in Pallas' interpret mode.
    """
    def make(body):
        if on_cpu:
            return pl.pallas_call(functools.partial(body, pl.program_id),
                                  out_shape=out_type, grid=grid, interpret=True)
        names = _GRID_NAMES[:len(grid)]
        return plgpu.kernel(
            functools.partial(body, lambda i: jax.lax.axis_index(names[i])),
            out_type=out_type, grid=grid, grid_names=names)
    return make


class _Layout(typing.NamedTuple):
    """How the kernels walk x of shape (rows, length)."""
    rows: int
    length: int
    padded: int  # length, padded to a multiple of _LANES
    chunk: int  # values of a row loaded at once
    accumulator: typing.Any  # the dtype sums are kept in

    @property
    def chunks(self):
        return self.padded // self.chunk

    def part(self, k):
        """Chunk k of a row, as an index."""
        return pl.ds(k * self.chunk, self.chunk)

    def sum_then_write(self, load, term, write_with):
        """Two passes over a row's chunks.

        The first adds up term(load(k)) over the chunks k; then, with
        write = write_with(total), the second calls write(k, load(k)) for
        every chunk. A row of at most _HELD_CHUNKS chunks is loaded once and
        stays in registers between the passes (the loops are unrolled); a
        longer one is loaded again.
        """
        held = self.chunks <= _HELD_CHUNKS

        def add(k, carry):
            total, kept = carry
            values = load(k)
            return total + term(values), kept + ((values,) if held else ())

        def put(k, carry):
            write(k, kept[k] if held else load(k))
            return carry

        first = (jnp.zeros((), self.accumulator), ())
        if held:
            carry = first
            for k in range(self.chunks):
                carry = add(k, carry)
            total, kept = carry
            write = write_with(total)
            for k in range(self.chunks):
                put(k, ())
        else:
            total, kept = jax.lax.fori_loop(0, self.chunks, add, first)
            write = write_with(total)
            jax.lax.fori_loop(0, self.chunks, put, ())


def forward(x, weight, *, eps, on_cpu):
    """(y, inv_rms), as the forward primitive returns them."""
    leading = leading_shape(x, weight)
    rows = _concrete_rows(x, weight)
    if rows == 0:
        return (jnp.zeros(x.shape, weight.dtype),
                jnp.zeros(leading, inv_rms_dtype(x.dtype)))
    y, inv_rms = _forward_rows(x.reshape(rows, weight.size), weight.reshape(-1), eps,
                               on_cpu=on_cpu)
    return y.reshape(x.shape), inv_rms.reshape(leading)


def backward(dy, inv_rms, x, weight, *, eps, on_cpu):
    """(dx, dweight), as the backward primitive returns them."""
    del eps  # inv_rms has it
    rows = _concrete_rows(x, weight)
    if rows == 0:
        return jnp.zeros(x.shape, x.dtype), jnp.zeros(weight.shape, weight.dtype)
    dx, dweight = _backward_rows(
        dy.reshape(rows, -1), inv_rms.reshape(rows), x.reshape(rows, -1),
        weight.reshape(-1), on_cpu=on_cpu)
    return dx.reshape(x.shape), dweight.reshape(weight.shape)


def _concrete_rows(x, weight):
    """The number of rows, which a kernel's grid needs as a number."""
    rows = leading_shape(x, weight)
    if not all(isinstance(size, int) for size in rows):
        raise NotImplementedError(
            f"rms_norm: implementation='pallas' needs concrete shapes (a Pallas "
            f"kernel's grid is its number of rows), got the symbolic leading "
            f"shape {rows}; export with implementation='ffi'")
    return math.prod(rows)


def _layout(x, other_dtype):
    """The _Layout of x, of shape (rows, length), beside an array of `other_dtype`."""
    rows, length = x.shape
    padded = -(-length // _LANES) * _LANES
    chunk = _chunk_length(padded, jnp.promote_types(x.dtype, other_dtype))
    return _Layout(rows, length, padded, chunk, inv_rms_dtype(x.dtype))


def _forward_rows(x, weight, eps, *, on_cpu):
    """(y, inv_rms) for x of shape (rows, row_length) and weight (row_length,)."""
    rows, length, padded, _, accumulator = layout = _layout(x, weight.dtype)

    @_kernel((_result(x, (rows, padded), weight.dtype), _result(x, (rows,), accumulator)),
             (rows,), on_cpu)
    def kernel(block, x_ref, w_ref, y_ref, inv_ref):
        row = block(0)

        def write_with(total):
            inv_rms = jax.lax.rsqrt(total / length + eps)
            inv_ref[row] = inv_rms

            def write(k, values):
                w = w_ref[layout.part(k)].astype(accumulator)
                y_ref[row, layout.part(k)] = (w * (values * inv_rms)).astype(y_ref.dtype)
            return write

        layout.sum_then_write(
            lambda k: x_ref[row, layout.part(k)].astype(accumulator),
            lambda values: jnp.sum(values * values), write_with)

    y, inv_rms = kernel(_padded(x, padded), _padded(weight, padded))
    return y[:, :length], inv_rms


def _backward_rows(dy, inv_rms, x, weight, *, on_cpu):
    """(dx, dweight) for dy and x of shape (rows, row_length), weight (row_length,)."""
    rows, length, padded, chunk, accumulator = layout = _layout(x, dy.dtype)
    dy, x, weight = (_padded(a, padded) for a in (dy, x, weight))

    @_kernel(_result(x, (rows, padded), x.dtype), (rows,), on_cpu)
    def dx_kernel(block, dy_ref, inv_ref, x_ref, w_ref, dx_ref):
        row = block(0)

        def load(k):  # x, and dy * weight
            part = layout.part(k)
            return (x_ref[row, part].astype(accumulator),
                    dy_ref[row, part].astype(accumulator) * w_ref[part].astype(accumulator))

        def write_with(total):
            inv = inv_ref[row]
            scale = inv * inv * (total / length)

            def write(k, values):
                x_values, dyw = values
                dx_ref[row, layout.part(k)] = (inv * (dyw - x_values * scale)).astype(dx_ref.dtype)
            return write

        layout.sum_then_write(load, lambda values: jnp.sum(values[0] * values[1]), write_with)

    shares = min(rows, _ROW_SHARES)

    @_kernel(_result(x, (shares, padded), accumulator),
             (padded // chunk, shares), on_cpu)
    def dweight_kernel(block, dy_ref, inv_ref, x_ref, partial_ref):
        part = layout.part(block(0))
        share = block(1)

        # A share is thousands of rows for large inputs: a plain running sum
        # of them loses accuracy as it grows, so the sum is compensated
        # (Kahan): `lost` carries what each addition rounded away.
        def add_row(i, carry):
            total, lost = carry
            row = share + i * shares
            dy_x = dy_ref[row, part].astype(accumulator) * x_ref[row, part].astype(accumulator)
            term = dy_x * inv_ref[row] - lost
            new_total = total + term
            return new_total, (new_total - total) - term

        zeros = jnp.zeros((chunk,), accumulator)
        partial_ref[share, part], _ = jax.lax.fori_loop(
            0, (rows - share + shares - 1) // shares, add_row, (zeros, zeros))

    dx = dx_kernel(dy, inv_rms, x, weight)
    dweight = dweight_kernel(dy, inv_rms, x).sum(axis=0)
    return dx[:, :length], dweight[:length].astype(weight.dtype)
