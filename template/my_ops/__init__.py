"""my_rms_norm: a custom JAX operation, from the book's template (README.md).

``my_rms_norm(x, weight, eps)`` normalises ``x`` (float16, bfloat16 or
float32) over its last axis and scales it by ``weight``, of x's dtype, with
the C++ and CUDA handlers of ``csrc/``, which sum in float32 or wider.
Each rule the book teaches is here once: the primitives and their abstract
evaluation (chapters 2 and 4), the lowering to the FFI call (chapter 3),
differentiation in both modes (chapter 5), the vmap rules (chapter 6) and
the partitioning across devices (chapter 7).
"""

import pathlib
import re
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import dispatch
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir, xla
from jax.sharding import NamedSharding, PartitionSpec as P

from my_ops import _native

__all__ = ["my_rms_norm"]


def _installed_ffi_api_version():
    """(major, minor) of the installed jaxlib's FFI API, from the header it
    ships; None where it ships none."""
    header = pathlib.Path(jax.ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h"
    if not header.is_file():
        return None
    found = [re.search(rf"#define XLA_FFI_API_{part} (\d+)", header.read_text())
             for part in ("MAJOR", "MINOR")]
    return tuple(int(m.group(1)) for m in found) if all(found) else None


def _check_ffi_api_version(built, installed):
    """An ImportError where the handlers were built against a newer FFI API
    than the installed jaxlib's (after an upgrade and a downgrade, say): XLA
    does not take such handlers, and the error here names the fix."""
    if installed is not None and tuple(built) > tuple(installed):
        raise ImportError(
            f"my_ops was built against XLA FFI API {built[0]}.{built[1]}, newer than the "
            f"installed jaxlib's {installed[0]}.{installed[1]}: rebuild it against this "
            "jaxlib (pip install --no-build-isolation .)")


_check_ffi_api_version(tuple(_native.ffi_api_version), _installed_ffi_api_version())

for _platform, _targets in _native.targets().items():
    for _name, _capsule in _targets.items():
        jax.ffi.register_ffi_target(_name, _capsule, platform=_platform)


# Primitives and abstract evaluation: forward (x, weight) -> (y, inv_rms);
# backward (dy, inv_rms, x, weight) -> (dx, dweight). inv_rms is float32,
# every other array x's dtype: one of DTYPES, which the handlers dispatch on.

DTYPES = (jnp.float16, jnp.bfloat16, jnp.float32)


def _like(aval, shape, dtype=None):
    """A result of `shape` and `dtype` (aval's by default), typed like the
    operand `aval` otherwise (its mesh axes too, cut to `shape`'s leading
    axes)."""
    sharding = aval.sharding.update(spec=tuple(aval.sharding.spec)[: len(shape)])
    return aval.update(shape=shape, dtype=dtype or aval.dtype, weak_type=False,
                       sharding=sharding)


def _primitive(name, abstract_eval):
    primitive = Primitive(name)
    primitive.multiple_results = True
    primitive.def_impl(partial(xla.apply_primitive, primitive))
    primitive.def_abstract_eval(abstract_eval)
    return primitive


def _check(x, weight, **others):
    """The operands a primitive takes, checked as the handlers check them, so
    that a misuse (a bind with other shapes or dtypes) fails where it is
    traced, naming the operand, and not in XLA at run time."""
    if x.dtype not in DTYPES:
        raise TypeError(f"my_rms_norm: x must be float16, bfloat16 or float32, got {x.dtype}")
    for name, aval in {"weight": weight, **others}.items():
        want = jnp.float32 if name == "inv_rms" else x.dtype
        if aval.dtype != want:
            raise TypeError(f"my_rms_norm: {name} must be {jnp.dtype(want).name} "
                            f"(as x is {x.dtype}), got {aval.dtype}")
    if x.ndim == 0 or weight.shape != x.shape[-1:]:
        raise ValueError(f"my_rms_norm: weight must have shape (x.shape[-1],), got x "
                         f"{x.shape} and weight {weight.shape}")
    for name, aval in others.items():
        want = {"inv_rms": x.shape[:-1], "dweight": weight.shape}.get(name, x.shape)
        if aval.shape != want:
            raise ValueError(f"my_rms_norm: {name} must have shape {want}, got {aval.shape}")


def _forward_abstract_eval(x, weight, *, eps):
    _check(x, weight)
    return _like(x, x.shape), _like(x, x.shape[:-1], jnp.float32)


def _backward_abstract_eval(dy, inv_rms, x, weight):
    _check(x, weight, dy=dy, inv_rms=inv_rms)
    return _like(x, x.shape), _like(weight, weight.shape)


forward_p = _primitive("my_rms_norm_fwd", _forward_abstract_eval)
backward_p = _primitive("my_rms_norm_bwd", _backward_abstract_eval)


# Lowering: each primitive becomes the FFI call on one device's shard, through
# a custom_partitioning function that says how to split it across devices.

def _forward_call(x, weight, eps):
    results = (jax.ShapeDtypeStruct(x.shape, x.dtype),
               jax.ShapeDtypeStruct(x.shape[:-1], jnp.float32))
    return jax.ffi.ffi_call("my_rms_norm_fwd", results)(x, weight, eps=np.float64(eps))


def _backward_call(dy, inv_rms, x, weight):
    results = (jax.ShapeDtypeStruct(x.shape, x.dtype),
               jax.ShapeDtypeStruct(weight.shape, weight.dtype))
    return jax.ffi.ffi_call("my_rms_norm_bwd", results)(dy, inv_rms, x, weight)


def _row_axes(mesh, x_info):
    """The mesh axes x's leading axes keep: those that split them evenly
    (padding rows would reach the weight gradient's sum)."""
    spec = (tuple(x_info.sharding.spec) + (None,) * len(x_info.shape))[: len(x_info.shape) - 1]
    kept = []
    for entry, size in zip(spec, x_info.shape[:-1]):
        names = () if entry is None else entry if isinstance(entry, tuple) else (entry,)
        devices = int(np.prod([mesh.shape[name] for name in names]))
        kept.append(entry if names and size % devices == 0 else None)
    return kept


def _rule(rank, backward=False):
    """The Shardy rule: rows (b0 b1 ...) may be split, the normalised axis n not."""
    rows = " ".join(f"b{i}" for i in range(rank - 1))
    x = f"{rows} n"
    text = f"{x}, {rows}, {x}, n -> {x}, n" if backward else f"{x}, n -> {x}, {rows}"
    return text, {"need_replication_factors": ("n",)}


def _shardings(mesh, x_info):
    rows = _row_axes(mesh, x_info)
    names = [a for entry in rows if entry for a in (entry if isinstance(entry, tuple) else (entry,))]
    return (NamedSharding(mesh, P(*rows, None)), NamedSharding(mesh, P(*rows)),
            NamedSharding(mesh, P()), tuple(names))


@partial(custom_partitioning, static_argnums=(2,))
def _forward(x, weight, eps):
    return _forward_call(x, weight, eps)


def _forward_partition(eps, mesh, arg_infos, result_infos):
    del result_infos
    x, rows, replicated, _ = _shardings(mesh, arg_infos[0])
    return mesh, partial(_forward_call, eps=eps), (x, rows), (x, replicated)


@custom_partitioning
def _backward(dy, inv_rms, x, weight):
    return _backward_call(dy, inv_rms, x, weight)


def _backward_partition(mesh, arg_infos, result_infos):
    del result_infos
    x, rows, replicated, row_axes = _shardings(mesh, arg_infos[2])

    def per_device(dy, inv_rms, x, weight):
        dx, dweight = _backward_call(dy, inv_rms, x, weight)
        # each device summed its own rows; the weight gradient sums them all
        return dx, jax.lax.psum(dweight, row_axes) if row_axes else dweight

    return mesh, per_device, (x, replicated), (x, rows, x, replicated)


_forward.def_partition(partition=_forward_partition,
                       sharding_rule=lambda eps, mesh, ops, res: _rule(len(ops[0].shape)))
_backward.def_partition(partition=_backward_partition,
                        sharding_rule=lambda mesh, ops, res: _rule(len(ops[2].shape), True))


def _lowering(partitioned, call):
    """Lower through `partitioned`; inside shard_map, where the operands are
    one device's shards already, straight to the FFI `call`."""
    def lowering(ctx, *operands, **params):  # (the forward's eps)
        manual = getattr(ctx.module_context.axis_context, "manual_axes", ())
        fn = call if manual else partitioned
        return mlir.lower_fun(lambda *args: fn(*args, *params.values()),
                              multiple_results=True)(ctx, *operands)
    return lowering


mlir.register_lowering(forward_p, _lowering(_forward, _forward_call))
mlir.register_lowering(backward_p, _lowering(_backward, _backward_call))
# custom_partitioning needs the devices while lowering, which jit passes only
# to computations holding a primitive of this set (no public API; chapter 7).
dispatch.prim_requires_devices_during_lowering.update({forward_p, backward_p})


# vmap: a batch of x is more rows; a batched weight, or the backward (whose
# weight gradient stays per example), runs once per example.

def _per_example(primitive, args, dims, **params):
    batched = [jnp.moveaxis(a, d, 0) for a, d in zip(args, dims) if d is not None]

    def one(example):
        parts = iter(example)
        return primitive.bind(*[next(parts) if d is not None else a
                                for a, d in zip(args, dims)], **params)

    outputs = jax.lax.map(one, batched)
    return outputs, [0] * len(outputs)


def _forward_batching(args, dims, *, eps):
    (x, weight), (x_dim, weight_dim) = args, dims
    if weight_dim is not None:
        return _per_example(forward_p, args, dims, eps=eps)
    outputs = forward_p.bind(jnp.moveaxis(x, x_dim, 0), weight, eps=eps)
    return outputs, [0, 0]


batching.primitive_batchers[forward_p] = _forward_batching
batching.primitive_batchers[backward_p] = partial(_per_example, backward_p)


# Differentiation, forward and reverse, as rules on the primitives. The
# forward's JVP gives y's tangent from tangent_p, which is linear in the
# tangents (dx, dweight), and inv_rms's in jax.numpy. Reverse mode
# transposes tangent_p, and its transpose is the backward kernel. Second
# derivatives (jax.hessian) differentiate tangent_p and backward_p: their
# JVPs are those of the same maths in jax.numpy, beside the kernels'
# values. The maths runs in float32, as the kernels do, and returns x's dtype.

def _mean(a):
    return jnp.mean(a, axis=-1, keepdims=True)


def _in_float32(*arrays):
    return [a.astype(jnp.float32) for a in arrays]


def _tangent_maths(dx, dweight, inv_rms, x, weight):
    """y's tangent: inv (w dx - x inv^2 mean(x dx) w) + x inv dweight."""
    dtype, inv = x.dtype, inv_rms[..., None]
    dx, dweight, x, weight = _in_float32(dx, dweight, x, weight)
    return (inv * weight * (dx - x * inv * inv * _mean(x * dx)) + x * inv * dweight).astype(dtype)


def _backward_maths(dy, inv_rms, x, weight):
    """What the backward kernels compute, in jax.numpy (for their JVP)."""
    dtype, inv = x.dtype, inv_rms[..., None]
    dy, x, weight = _in_float32(dy, x, weight)
    dx = inv * (dy * weight - x * inv * inv * _mean(dy * weight * x))
    rows = tuple(range(x.ndim - 1))
    return dx.astype(dtype), jnp.sum(dy * x * inv, axis=rows).astype(dtype)


def _tangent_abstract_eval(dx, dweight, inv_rms, x, weight):
    _check(x, weight, dx=dx, dweight=dweight, inv_rms=inv_rms)
    return _like(x, x.shape)


tangent_p = Primitive("my_rms_norm_tangent")
tangent_p.def_impl(partial(xla.apply_primitive, tangent_p))
tangent_p.def_abstract_eval(_tangent_abstract_eval)
mlir.register_lowering(tangent_p, mlir.lower_fun(_tangent_maths, multiple_results=False))


def _forward_jvp(primals, tangents, *, eps):
    x, weight = primals
    dx, dweight = (ad.instantiate_zeros(t) for t in tangents)
    y, inv_rms = forward_p.bind(x, weight, eps=eps)
    dy = tangent_p.bind(dx, dweight, inv_rms, x, weight)
    d_inv_rms = -(inv_rms ** 3) * jnp.mean(jnp.multiply(*_in_float32(x, dx)), axis=-1)
    return (y, inv_rms), (dy, d_inv_rms)


def _tangent_transpose(cotangent, dx, dweight, inv_rms, x, weight):
    # Only the tangents are linear; inv_rms, x and weight are known here.
    ct_dx, ct_dweight = backward_p.bind(ad.instantiate_zeros(cotangent), inv_rms, x, weight)
    return (ct_dx if ad.is_undefined_primal(dx) else None,
            ct_dweight if ad.is_undefined_primal(dweight) else None, None, None, None)


ad.primitive_jvps[forward_p] = _forward_jvp
ad.primitive_transposes[tangent_p] = _tangent_transpose


# Second derivatives differentiate the rules: tangent_p and backward_p.
def _maths_jvp(maths, primitive):
    """The JVP of a primitive (of no parameters) that computes `maths`: its
    own values, and the tangents of the same maths in jax.numpy."""
    def jvp(primals, tangents):
        tangents = [ad.instantiate_zeros(t) for t in tangents]
        _, out_tangents = jax.jvp(maths, tuple(primals), tuple(tangents))
        return primitive.bind(*primals), out_tangents
    return jvp


ad.primitive_jvps[tangent_p] = _maths_jvp(_tangent_maths, tangent_p)
ad.primitive_jvps[backward_p] = _maths_jvp(_backward_maths, backward_p)
batching.primitive_batchers[tangent_p] = lambda args, dims: (
    jax.vmap(_tangent_maths, in_axes=dims)(*args), 0)


def _vary_alike(x, weight):
    """x and the weight, each made to vary along the mesh axes the other
    varies along. Inside ``shard_map`` an operand the in_specs replicate (the
    weight, beside rows split over devices) is the same on every device; the
    backward kernel's weight gradient is then per device, and only this cast to
    varying (``jax.lax.pcast``, free at run time) makes grad sum it over the
    devices: its transpose is that sum. Without it the weight gradient is
    silently one device's. Outside ``shard_map`` nothing varies: no cast."""
    axes = [jax.typeof(a).manual_axis_type.varying for a in (x, weight)]
    every = frozenset().union(*axes)
    return tuple(jax.lax.pcast(a, tuple(every - own), to="varying")
                 for a, own in zip((x, weight), axes))


def my_rms_norm(x, weight, eps=1e-5):
    """``x / sqrt(mean(x**2, axis=-1) + eps) * weight`` for ``x`` of float16,
    bfloat16 or float32 and a ``weight`` of x's dtype as long as x's last
    axis, summed in float32; works under jit, grad, jvp (and so hessian),
    vmap, with x's rows sharded across devices, inside shard_map, and in
    jax.export (README.md says how for sharded calls)."""
    x, weight = jnp.asarray(x), jnp.asarray(weight)
    _check(jax.typeof(x), jax.typeof(weight))
    if not isinstance(eps, (int, float)) or not 0 <= eps < float("inf"):
        raise ValueError(f"my_rms_norm: eps must be a finite number >= 0, got {eps!r}")
    return forward_p.bind(*_vary_alike(x, weight), eps=float(eps))[0]
