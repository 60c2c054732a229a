"""A row softmax as a JAX operation: the book's exercise track, solved.

Each chapter's exercise fills in one step, between its markers. Run a
step's check from its chapter (`exercises.checks.check(step)`), or all of
them with `python -m exercises.checks`.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
from jax._src import dispatch
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir
from jax.sharding import NamedSharding, PartitionSpec as P

from exercises.build import build_library

# softmax_cpu.cc and softmax_cuda.cu (where nvcc is found), compiled once
library = build_library(Path(__file__).parent)


# [step 1] chapter 1: registration
def register():
    """Register the handlers under the name `library.name`, for each platform."""
    jax.ffi.register_ffi_target(library.name, jax.ffi.pycapsule(library.cpu.SoftmaxCpu),
                                platform="cpu")
    if library.cuda is not None:
        jax.ffi.register_ffi_target(library.name, jax.ffi.pycapsule(library.cuda.SoftmaxCuda),
                                    platform="CUDA")
# [step 1 end]


register()
softmax_p = Primitive("my_softmax")


# [step 2] chapter 2: the primitive's implementation
def softmax_impl(x):
    """x's softmax over its last axis, by the handler."""
    return jax.ffi.ffi_call(library.name, jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
# [step 2 end]


softmax_p.def_impl(softmax_impl)


# [step 3] chapter 3: the lowering
def softmax_lowering(ctx, x):
    """The StableHLO of one call: the FFI custom call."""
    return jax.ffi.ffi_lowering(library.name)(ctx, x)
# [step 3 end]


mlir.register_lowering(softmax_p, softmax_lowering)


# [step 4] chapter 4: abstract evaluation
def softmax_abstract_eval(x):
    """The result's shape and dtype, from x's, and errors for what the handler can't take."""
    if x.dtype != jnp.float32:
        raise TypeError(f"softmax: x must be float32, got {x.dtype}")
    if x.ndim == 0:
        raise ValueError("softmax: x must have at least one axis")
    return x
# [step 4 end]


softmax_p.def_abstract_eval(softmax_abstract_eval)


@jax.custom_jvp
def softmax(x):
    """x's softmax over its last axis."""
    return softmax_p.bind(x)


# [step 5] chapter 5: the JVP, for forward and reverse mode
def softmax_jvp(primals, tangents):
    """softmax(x) by the kernel, and its tangent for x's tangent dx: linear
    in dx and written in jax.numpy, so that JAX transposes it for grad."""
    (x,), (dx,) = primals, tangents
    y = softmax_p.bind(x)
    return y, y * (dx - jnp.sum(y * dx, axis=-1, keepdims=True))
# [step 5 end]


softmax.defjvp(softmax_jvp)


# [step 6] chapter 6: the vmap rule
def softmax_batch(args, dims):
    """softmax_p of a batch: x with a batch axis at dims[0]."""
    (x,), (axis,) = args, dims
    if axis == x.ndim - 1:  # the batch axis must not be the one normalised
        x, axis = jnp.moveaxis(x, axis, 0), 0
    return softmax_p.bind(x), axis
# [step 6 end]


batching.primitive_batchers[softmax_p] = softmax_batch


# [step 7] chapter 7: the sharding rule
def softmax_partition(mesh, arg_infos, result_infos):
    """Each device's call, and the shardings it takes and gives: rows stay
    split as x's are, the last axis is whole on every device."""
    del result_infos
    spec = tuple(arg_infos[0].sharding.spec)
    rows = (spec + (None,) * arg_infos[0].ndim)[: arg_infos[0].ndim - 1]
    sharding = NamedSharding(mesh, P(*rows, None))
    return mesh, softmax_impl, sharding, (sharding,)
# [step 7 end]


softmax_partitioned = custom_partitioning(softmax_impl)
softmax_partitioned.def_partition(partition=softmax_partition, sharding_rule="... i -> ... i",
                                  need_replication_factors=("i",))


def softmax_sharded_lowering(ctx, x):
    # Inside shard_map, x is one device's part already: step 3's lowering.
    if getattr(ctx.module_context.axis_context, "manual_axes", ()):
        return softmax_lowering(ctx, x)
    return mlir.lower_fun(softmax_partitioned, multiple_results=False)(ctx, x)


mlir.register_lowering(softmax_p, softmax_sharded_lowering)
# custom_partitioning needs the devices while lowering, which jit passes only
# to computations holding a primitive of this set (no public API; chapter 7).
dispatch.prim_requires_devices_during_lowering.add(softmax_p)
