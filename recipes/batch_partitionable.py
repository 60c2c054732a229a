"""The polynomial activation (`recipes.polynomial`) as a batch-partitionable
custom call: sharded along its leading axes, each device runs the handler on
its own rows, with no gather.

XLA partitions a custom call that way only when both hold: the target is
registered as batch-partitionable (`register(library)`), and its lowering
says how many leading axes are batch axes and gives Shardy a sharding rule
(`polynomial_rows_p`'s lowering). Either alone, XLA gathers the input and
runs the whole call on every device.
"""

import jax
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import mlir

from recipes.polynomial import attributes, checked_x


def register(library):
    """Register the polynomial handlers of `library` again under a name of
    their own, as batch-partitionable, and return that name."""
    name = f"{library.name}_batch_partitionable"
    library.register("PolynomialCpuHandler", "PolynomialCudaHandler", name=name)
    jax.ffi.register_ffi_target_as_batch_partitionable(name)
    return name


polynomial_rows_p = Primitive("recipe_polynomial_rows")
polynomial_rows_p.def_impl(lambda x, **params: jax.jit(polynomial_rows_p.bind,
                                                       static_argnames=tuple(params))(x, **params))
polynomial_rows_p.def_abstract_eval(lambda x, **_: jax.core.ShapedArray(x.shape, x.dtype))


FACTORS = "ijklmnop"  # the names of the rule's factors, one per axis


def sharding_rule(shape):
    """Shardy's rule for one operand and one result of `shape`: a factor
    per axis, the same in both, and the last axis whole on each device."""
    factors = FACTORS[:len(shape)]
    axes = ", ".join(factors)
    sizes = ", ".join(f"{f}={n}" for f, n in zip(factors, shape))
    return mlir.ir.Attribute.parse(f"#sdy.op_sharding_rule<([{axes}])->([{axes}]) {{{sizes}}} "
                                   f"need_replication={{{factors[-1]}}}>")


def _lowering(ctx, x, *, target, coefficients, low, high, describe_batch):
    (aval,) = ctx.avals_in
    extra = None
    if describe_batch:
        extra = {"mhlo.frontend_attributes": mlir.ir_attribute(
                     {"num_batch_dims": str(len(aval.shape) - 1)}),
                 "sdy.sharding_rule": sharding_rule(aval.shape)}
    rule = jax.ffi.ffi_lowering(target, extra_attributes=extra)
    return rule(ctx, x, **attributes(coefficients, low, high))


mlir.register_lowering(polynomial_rows_p, _lowering)


def polynomial_rows(target, x, coefficients, low=-np.inf, high=np.inf, *, describe_batch=True):
    """The polynomial of `x` (rows, ...) through `target`; `describe_batch`
    adds the lowering's batch attributes (False shows what they do)."""
    x = checked_x(x)
    if not 1 <= x.ndim <= len(FACTORS):
        raise ValueError(f"polynomial_rows: x must have 1 to {len(FACTORS)} axes, got {x.ndim}")
    attributes(coefficients, low, high)  # checked here, where the caller sees the error
    return polynomial_rows_p.bind(x, target=target, coefficients=tuple(map(float, coefficients)),
                                  low=float(low), high=float(high),
                                  describe_batch=describe_batch)
