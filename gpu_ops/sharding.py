"""Partitioning RMS norm across devices with ``custom_partitioning``.

XLA cannot see inside a custom call, so without help it gathers a sharded
input onto every device before calling it. Every row is normalised on its
own, though, so each device can work on its own rows. The rules here say so:

- the leading (row) axes keep the sharding the input has, where the mesh
  axes divide them evenly (padding rows must not reach the weight gradient);
- the normalised axes, and the weight, are replicated (an input sharded along
  a normalised axis is gathered first, so the answer stays right);
- the weight gradient, a sum over rows, is summed across the devices that
  hold different rows (a ``psum``).

A residual operand of the forward (and its result, ``x + residual``) is
sharded as x is; a scale per row, and the float8 forward's scales per group
(and those of a float8 input), as the rows are. ``rms_norm_fwd_p`` and ``rms_norm_bwd_p`` are lowered
through these partitioned functions to the per-shard primitives.

Inside ``shard_map`` the caller partitions instead, and :func:`vary_alike`
gives the operands the types ``shard_map`` checks. Arrays whose types shard
them along explicit mesh axes go through ``shard_map`` too
(:func:`over_explicit_axes`).
"""

from functools import partial

import jax
from jax._src import dispatch
from jax.experimental.custom_partitioning import custom_partitioning
from jax.interpreters import mlir
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from gpu_ops.primitives import (
    inv_rms_dtype,
    rms_norm_bwd_p,
    rms_norm_bwd_shard_p,
    rms_norm_fp8_fwd_p,
    rms_norm_fp8_fwd_shard_p,
    rms_norm_fp8_scaled_fwd_p,
    rms_norm_fp8_scaled_fwd_shard_p,
    rms_norm_from_fp8_bwd_p,
    rms_norm_from_fp8_bwd_shard_p,
    rms_norm_from_fp8_fwd_p,
    rms_norm_from_fp8_fwd_shard_p,
    rms_norm_fwd_p,
    rms_norm_fwd_shard_p,
    rms_norm_through_fp8_input_fwd_p,
    rms_norm_through_fp8_input_fwd_shard_p,
)


def _factor_names(x_rank, weight_rank):
    rows = [f"b{i}" for i in range(x_rank - weight_rank)]
    normalised = [f"n{i}" for i in range(weight_rank)]
    return " ".join(rows), " ".join(normalised), tuple(normalised)


def _forward_rule(eps, kernels, mesh, operand_types, result_types):
    del eps, kernels, mesh, result_types
    rows, normalised, replicated = _factor_names(
        len(operand_types[0].shape), len(operand_types[1].shape))
    x = f"{rows} {normalised}"
    like_x = [x] * (len(operand_types) - 2)  # a residual, and x + residual
    rule = f"{', '.join([x, normalised, *like_x])} -> {', '.join([x, rows, *like_x])}"
    return rule, {"need_replication_factors": replicated}


def _backward_rule(eps, kernels, mesh, operand_types, result_types):
    del eps, kernels, mesh, result_types
    rows, normalised, replicated = _factor_names(
        len(operand_types[2].shape), len(operand_types[3].shape))
    x = f"{rows} {normalised}"
    rule = f"{x}, {rows}, {x}, {normalised} -> {x}, {normalised}"
    return rule, {"need_replication_factors": replicated}


def _mesh_axes(spec):
    """The mesh axis names a PartitionSpec uses."""
    axes = []
    for entry in spec:
        if entry is not None:
            axes.extend(entry if isinstance(entry, tuple) else (entry,))
    return tuple(axes)


def _dividing_axes(entry, size, mesh):
    """The longest leading run of `entry`'s mesh axes whose devices divide `size`.

    A mesh axis that does not divide a row axis would split it into padded
    shards: XLA pads the last shards with rows of its own, and a kernel
    cannot tell those from real rows. The forward drops what it computes for
    them, but the weight gradient, a sum over rows, would add them in. Such
    an axis (and any after it) is left out, so its rows are gathered first.
    """
    axes = () if entry is None else entry if isinstance(entry, tuple) else (entry,)
    kept, devices = [], 1
    for axis in axes:
        devices *= mesh.shape[axis]
        if size % devices:
            break
        kept.append(axis)
    return tuple(kept) if len(kept) > 1 else (kept[0] if kept else None)


def _row_shardings(mesh, x_info, weight_ndim):
    """Shardings that keep x's evenly split row axes and replicate the rest.

    Returns the shardings of x, of inv_rms and of a replicated array, and the
    mesh axes the rows are split over.
    """
    lead = len(x_info.shape) - weight_ndim
    spec = (tuple(x_info.sharding.spec) + (None,) * lead)[:lead]
    rows = tuple(_dividing_axes(entry, size, mesh)
                 for entry, size in zip(spec, x_info.shape[:lead]))
    x_sharding = NamedSharding(mesh, PartitionSpec(*rows, *(None,) * weight_ndim))
    inv_sharding = NamedSharding(mesh, PartitionSpec(*rows))
    replicated = NamedSharding(mesh, PartitionSpec())
    return x_sharding, inv_sharding, replicated, _mesh_axes(rows)


def _forward_partition(eps, kernels, mesh, arg_infos, result_infos):
    del result_infos
    x_info, weight_info, *residual = arg_infos
    x_sharding, inv_sharding, replicated, _ = _row_shardings(
        mesh, x_info, len(weight_info.shape))
    like_x = (x_sharding,) * len(residual)
    per_shard = partial(_bind_forward_shard, eps=eps, kernels=kernels)
    return (mesh, per_shard, (x_sharding, inv_sharding, *like_x),
            (x_sharding, replicated, *like_x))


def _fp8_forward_rule(eps, kernels, mesh, operand_types, result_types, scaled=False):
    """The float8 forward's rule; `scaled`: with a scale per row, the last operand."""
    del eps, kernels, mesh, result_types
    rows, normalised, replicated = _factor_names(len(operand_types[0].shape), 1)
    x = f"{rows} {normalised}"
    like_x = [x] * (len(operand_types) - 2 - scaled)  # a residual, and x + residual
    row_scales = [rows] if scaled else []
    # g: the groups of a row, each with its scale
    rule = (f"{', '.join([x, normalised, *like_x, *row_scales])} -> "
            f"{', '.join([x, rows, f'{rows} g', *like_x])}")
    return rule, {"need_replication_factors": (*replicated, "g")}


def _fp8_forward_partition(eps, kernels, mesh, arg_infos, result_infos, scaled=False):
    del kernels, result_infos
    x_info, weight_info, *rest = arg_infos
    x_sharding, inv_sharding, replicated, _ = _row_shardings(
        mesh, x_info, len(weight_info.shape))
    scales_sharding = _group_sharding(inv_sharding)
    like_x = (x_sharding,) * (len(rest) - scaled)
    row_scales = (inv_sharding,) if scaled else ()
    primitive = rms_norm_fp8_scaled_fwd_shard_p if scaled else rms_norm_fp8_fwd_shard_p
    per_shard = partial(_bind_fp8_forward_shard, eps=eps, primitive=primitive)
    return (mesh, per_shard, (x_sharding, inv_sharding, scales_sharding, *like_x),
            (x_sharding, replicated, *like_x, *row_scales))


def _backward_partition(eps, kernels, mesh, arg_infos, result_infos):
    del result_infos
    x_info, weight_info = arg_infos[2], arg_infos[3]
    x_sharding, inv_sharding, replicated, row_axes = _row_shardings(
        mesh, x_info, len(weight_info.shape))

    def per_shard(dy, inv_rms, x, weight):
        dx, dweight = _backward.fun(dy, inv_rms, x, weight, eps, kernels)
        return dx, _summed_over_rows(dweight, row_axes, inv_rms_dtype(x.dtype))

    arg_shardings = (x_sharding, inv_sharding, x_sharding, replicated)
    return mesh, per_shard, (x_sharding, replicated), arg_shardings


def _summed_over_rows(dweight, row_axes, accumulator):
    """The weight gradient summed, in `accumulator`'s dtype, over the devices
    that hold different rows (each device summed only its own)."""
    if not row_axes:
        return dweight
    return jax.lax.psum(dweight.astype(accumulator), row_axes).astype(dweight.dtype)


def _group_sharding(inv_sharding):
    """The sharding of a scale per group of a row: the rows', then the groups
    replicated."""
    return NamedSharding(inv_sharding.mesh, PartitionSpec(*inv_sharding.spec, None))


# The primitives of a float8 input: each operand and result by what it is
# (x: rows and the normalised axis; n: the normalised axis, the weight;
# rows: one per row; groups: one per group of a row) and which operand is x.
_FROM_FP8_FORWARD = (("x", "n", "groups"), ("x", "rows"), 0)
_THROUGH_FP8_INPUT_FORWARD = (("x", "n"), ("x", "rows", "x", "groups"), 0)
_FROM_FP8_BACKWARD = (("x", "rows", "x", "n", "groups"), ("x", "n"), 2)


def _grouped_rule(kinds):
    """The sharding rule of a primitive of a float8 input, whose operands and
    results are `kinds`: rows keep their sharding, the normalised axis and
    the groups of a row (g) are replicated."""
    operands, results, x_operand = kinds

    def rule(eps, kernels, mesh, operand_types, result_types):
        del eps, kernels, mesh, result_types
        rows, normalised, replicated = _factor_names(len(operand_types[x_operand].shape), 1)
        factors = {"x": f"{rows} {normalised}", "n": normalised, "rows": rows,
                   "groups": f"{rows} g"}
        text = (f"{', '.join(factors[k] for k in operands)} -> "
                f"{', '.join(factors[k] for k in results)}")
        return text, {"need_replication_factors": (*replicated, "g")}
    return rule


def _grouped_shardings(mesh, x_info):
    """The shardings of _grouped_rule's kinds of arrays, and the mesh axes
    the rows are split over."""
    x_sharding, inv_sharding, replicated, row_axes = _row_shardings(mesh, x_info, 1)
    return {"x": x_sharding, "n": replicated, "rows": inv_sharding,
            "groups": _group_sharding(inv_sharding)}, row_axes


def _grouped_forward_partition(kinds, primitive):
    """The partition function of a forward of a float8 input."""
    operands, results, x_operand = kinds

    def partition(eps, kernels, mesh, arg_infos, result_infos):
        del kernels, result_infos
        shardings, _ = _grouped_shardings(mesh, arg_infos[x_operand])
        per_shard = partial(_bind_fp8_forward_shard, eps=eps, primitive=primitive)
        return (mesh, per_shard, tuple(shardings[k] for k in results),
                tuple(shardings[k] for k in operands))
    return partition


def _from_fp8_backward_partition(eps, kernels, mesh, arg_infos, result_infos):
    del kernels, result_infos
    operands, results, x_operand = _FROM_FP8_BACKWARD
    shardings, row_axes = _grouped_shardings(mesh, arg_infos[x_operand])

    def per_shard(dy, inv_rms, values, weight, scales):
        dx, dweight = rms_norm_from_fp8_bwd_shard_p.bind(
            dy, inv_rms, values, weight, scales, eps=eps)
        return dx, _summed_over_rows(dweight, row_axes, inv_rms.dtype)

    return (mesh, per_shard, tuple(shardings[k] for k in results),
            tuple(shardings[k] for k in operands))


def _bind_forward_shard(*operands, eps, kernels):
    return tuple(rms_norm_fwd_shard_p.bind(*operands, eps=eps, kernels=kernels))


@partial(custom_partitioning, static_argnums=(2, 3))
def _forward(x, weight, eps, kernels):
    return _bind_forward_shard(x, weight, eps=eps, kernels=kernels)


@partial(custom_partitioning, static_argnums=(3, 4))
def _residual_forward(x, weight, residual, eps, kernels):
    return _bind_forward_shard(x, weight, residual, eps=eps, kernels=kernels)


def _bind_fp8_forward_shard(*operands, eps, primitive=rms_norm_fp8_fwd_shard_p):
    return tuple(primitive.bind(*operands, eps=eps))


@partial(custom_partitioning, static_argnums=(2, 3))
def _fp8_forward(x, weight, eps, kernels):
    del kernels  # the FFI kernels only
    return _bind_fp8_forward_shard(x, weight, eps=eps)


@partial(custom_partitioning, static_argnums=(3, 4))
def _residual_fp8_forward(x, weight, residual, eps, kernels):
    del kernels
    return _bind_fp8_forward_shard(x, weight, residual, eps=eps)


@partial(custom_partitioning, static_argnums=(3, 4))
def _scaled_fp8_forward(x, weight, row_scales, eps, kernels):
    del kernels
    return _bind_fp8_forward_shard(x, weight, row_scales, eps=eps,
                                   primitive=rms_norm_fp8_scaled_fwd_shard_p)


@partial(custom_partitioning, static_argnums=(4, 5))
def _residual_scaled_fp8_forward(x, weight, residual, row_scales, eps, kernels):
    del kernels
    return _bind_fp8_forward_shard(x, weight, residual, row_scales, eps=eps,
                                   primitive=rms_norm_fp8_scaled_fwd_shard_p)


@partial(custom_partitioning, static_argnums=(4, 5))
def _backward(dy, inv_rms, x, weight, eps, kernels):
    return tuple(rms_norm_bwd_shard_p.bind(
        dy, inv_rms, x, weight, eps=eps, kernels=kernels))


@partial(custom_partitioning, static_argnums=(3, 4))
def _from_fp8_forward(values, weight, scales, eps, kernels):
    del kernels  # the FFI kernels only
    return _bind_fp8_forward_shard(values, weight, scales, eps=eps,
                                   primitive=rms_norm_from_fp8_fwd_shard_p)


@partial(custom_partitioning, static_argnums=(2, 3))
def _through_fp8_input_forward(x, weight, eps, kernels):
    del kernels
    return _bind_fp8_forward_shard(x, weight, eps=eps,
                                   primitive=rms_norm_through_fp8_input_fwd_shard_p)


@partial(custom_partitioning, static_argnums=(5, 6))
def _from_fp8_backward(dy, inv_rms, values, weight, scales, eps, kernels):
    del kernels
    return tuple(rms_norm_from_fp8_bwd_shard_p.bind(dy, inv_rms, values, weight, scales,
                                                    eps=eps))


_forward.def_partition(partition=_forward_partition, sharding_rule=_forward_rule)
_residual_forward.def_partition(partition=_forward_partition, sharding_rule=_forward_rule)
_backward.def_partition(partition=_backward_partition, sharding_rule=_backward_rule)
_fp8_forward.def_partition(partition=_fp8_forward_partition, sharding_rule=_fp8_forward_rule)
_residual_fp8_forward.def_partition(partition=_fp8_forward_partition,
                                    sharding_rule=_fp8_forward_rule)
_from_fp8_forward.def_partition(
    partition=_grouped_forward_partition(_FROM_FP8_FORWARD, rms_norm_from_fp8_fwd_shard_p),
    sharding_rule=_grouped_rule(_FROM_FP8_FORWARD))
_through_fp8_input_forward.def_partition(
    partition=_grouped_forward_partition(_THROUGH_FP8_INPUT_FORWARD,
                                         rms_norm_through_fp8_input_fwd_shard_p),
    sharding_rule=_grouped_rule(_THROUGH_FP8_INPUT_FORWARD))
_from_fp8_backward.def_partition(partition=_from_fp8_backward_partition,
                                 sharding_rule=_grouped_rule(_FROM_FP8_BACKWARD))
for _scaled in (_scaled_fp8_forward, _residual_scaled_fp8_forward):
    _scaled.def_partition(partition=partial(_fp8_forward_partition, scaled=True),
                          sharding_rule=partial(_fp8_forward_rule, scaled=True))


def _lowering_through(partitioned):
    """A lowering rule that hands the operands to a custom_partitioning function
    (`partitioned`, by number of operands).

    Inside ``shard_map`` the operands are one device's shards already, so the
    per-shard function is lowered as it is. custom_partitioning does the same
    itself where every mesh axis is manual, but where only some are (a
    ``shard_map`` with ``axis_names``) it would call the partition function
    with shardings that name no mesh axes; XLA then gathers along the axes
    left automatic, if anything is split along them, before the call.
    """
    def lowering(ctx, *operands, eps, kernels="ffi"):
        manual = getattr(ctx.module_context.axis_context, "manual_axes", ())
        chosen = partitioned[len(operands)]
        fn = chosen.fun if manual else chosen
        return mlir.lower_fun(
            lambda *args: fn(*args, eps, kernels), multiple_results=True
        )(ctx, *operands)
    return lowering


mlir.register_lowering(rms_norm_fwd_p, _lowering_through({2: _forward, 3: _residual_forward}))
mlir.register_lowering(rms_norm_bwd_p, _lowering_through({4: _backward}))
mlir.register_lowering(rms_norm_fp8_fwd_p,
                       _lowering_through({2: _fp8_forward, 3: _residual_fp8_forward}))
mlir.register_lowering(rms_norm_fp8_scaled_fwd_p, _lowering_through(
    {3: _scaled_fp8_forward, 4: _residual_scaled_fp8_forward}))
mlir.register_lowering(rms_norm_from_fp8_fwd_p, _lowering_through({3: _from_fp8_forward}))
mlir.register_lowering(rms_norm_from_fp8_bwd_p, _lowering_through({5: _from_fp8_backward}))
mlir.register_lowering(rms_norm_through_fp8_input_fwd_p,
                       _lowering_through({2: _through_fp8_input_forward}))

# custom_partitioning needs the device assignment while lowering; jit provides
# it only to computations holding a primitive in this set. JAX adds its own
# custom_partitioning primitive; ours hide it inside their lowering, so they
# are added too (there is no public API for this; TransformerEngine does the same).
dispatch.prim_requires_devices_during_lowering.update(
    {rms_norm_fwd_p, rms_norm_bwd_p, rms_norm_fp8_fwd_p, rms_norm_fp8_scaled_fwd_p,
     rms_norm_from_fp8_fwd_p, rms_norm_from_fp8_bwd_p, rms_norm_through_fp8_input_fwd_p})


def vary_alike(*arrays):
    """The arrays (x, weight, and a residual), each made to vary along the mesh
    axes any of the others varies along.

    Inside ``shard_map`` a value's type says along which mesh axes it differs
    from device to device. Rows sharded along an axis meet a weight that is
    the same on every device: as jnp's arithmetic does for such operands, the
    weight is cast to varying (``jax.lax.pcast``), which costs nothing when it
    runs. The transpose of that cast is a ``psum``, so under ``grad`` the
    weight's gradient comes out summed over those axes, as a replicated
    value's must. Outside ``shard_map`` nothing varies and both are returned
    as they are.
    """
    axes = [jax.typeof(a).manual_axis_type.varying for a in arrays]
    every = frozenset().union(*axes)
    return tuple(jax.lax.pcast(a, tuple(every - own), to="varying")
                 for a, own in zip(arrays, axes))


def over_explicit_axes(fn, x, weight, *like_x):
    """fn(x, weight, *like_x), per device where the types of the arrays shard
    them; like_x (a residual) is placed as x is.

    With explicit mesh axes (sharding in types, ``jax.make_mesh``'s default)
    the backward's partition function above does not compile: XLA rejects
    the reduction of its ``psum`` ("Unsupported reduction computation", JAX
    0.12.0.1 on CPU devices). Where a type shards x or the weight, the op
    runs inside ``shard_map`` instead, over every mesh axis not manual yet, so
    that no explicit axis is left inside. x's rows stay where they are; a
    normalised axis or a weight sharded along a mesh axis is gathered first
    (``jax.reshard`` to the partition functions' own shardings); and the transpose of
    :func:`vary_alike`'s cast sums the weight gradient. Types without
    explicit axes shard nothing: fn is called as it is.

    Inside a ``shard_map`` that left some explicit axes to the types, a
    second ``shard_map`` over those would nest, and JAX cannot differentiate
    nested ``shard_map``s over explicit axes (tests/test_sharding.py keeps
    the reproduction): there x's rows are gathered along those axes instead.
    """
    x_type, weight_type = jax.typeof(x), jax.typeof(weight)
    sharded = [t for t in (x_type, weight_type, *map(jax.typeof, like_x))
               if _mesh_axes(t.sharding.spec)]
    if not sharded:
        return fn(x, weight, *like_x)
    mesh = sharded[0].sharding.mesh
    x_sharding, _, replicated, row_axes = _row_shardings(mesh, x_type, weight_type.ndim)
    if AxisType.Manual in mesh.axis_types:
        x_sharding = NamedSharding(mesh, PartitionSpec())
        row_axes = ()
    x, weight = jax.reshard(x, x_sharding), jax.reshard(weight, replicated)
    like_x = [jax.reshard(a, x_sharding) for a in like_x]
    if not row_axes:
        return fn(x, weight, *like_x)
    not_manual = {name for name, kind in zip(mesh.axis_names, mesh.axis_types)
                  if kind != AxisType.Manual}
    in_specs = (x_sharding.spec, replicated.spec, *(x_sharding.spec for _ in like_x))
    return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=x_sharding.spec,
                         axis_names=not_manual)(x, weight, *like_x)
