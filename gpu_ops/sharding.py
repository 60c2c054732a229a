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
(and those of a float8 input), as the rows are. Each primitive's layout
(``primitives.DESCRIPTIONS``: what each operand and result is) gives its
rule, its partition function and its custom_partitioning function, through
which the primitive is lowered to its per-shard twin.

Inside ``shard_map`` the caller partitions instead, and :func:`vary_alike`
gives the operands the types ``shard_map`` checks. Arrays whose types shard
them along explicit mesh axes go through ``shard_map`` too
(:func:`over_explicit_axes`).
"""

import jax
from jax._src import dispatch
from jax.experimental.custom_partitioning import custom_partitioning
from jax.interpreters import mlir
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from gpu_ops.primitives import DESCRIPTIONS, inv_rms_dtype


def _sharding_rule(layout):
    """The Shardy rule of a primitive of `layout` (primitives.Layout): rows
    (b0 b1 ...) keep their sharding; the normalised axes (n0 ...), and the
    groups of a row (g), are replicated."""
    def rule(eps, params, mesh, operand_types, result_types):
        del eps, params, mesh, result_types
        weight_rank = len(operand_types[layout.operands.index("n")].shape)
        rank = len(operand_types[layout.x].shape)
        rows = " ".join(f"b{i}" for i in range(rank - weight_rank))
        normalised = [f"n{i}" for i in range(weight_rank)]
        factors = {"x": f"{rows} {' '.join(normalised)}", "n": " ".join(normalised),
                   "dn": " ".join(normalised), "rows": rows, "groups": f"{rows} g"}
        text = (f"{', '.join(factors[k] for k in layout.operands)} -> "
                f"{', '.join(factors[k] for k in layout.results)}")
        grouped = "groups" in layout.operands + layout.results
        return text, {"need_replication_factors": (*normalised, *(["g"] if grouped else []))}
    return rule


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


def _summed_over_rows(dweight, row_axes, accumulator):
    """The weight gradient summed, in `accumulator`'s dtype, over the devices
    that hold different rows (each device summed only its own)."""
    if not row_axes:
        return dweight
    return jax.lax.psum(dweight.astype(accumulator), row_axes).astype(dweight.dtype)


def _partition(layout, per_shard):
    """The partition function of a primitive of `layout`: each device runs
    `per_shard` on its rows, with the normalised axes whole, and the weight
    gradient is summed over the devices that hold different rows."""
    def partition(eps, params, mesh, arg_infos, result_infos):
        del result_infos
        x_info = arg_infos[layout.x]
        weight_rank = len(arg_infos[layout.operands.index("n")].shape)
        x, rows, replicated, row_axes = _row_shardings(mesh, x_info, weight_rank)
        groups = NamedSharding(mesh, PartitionSpec(*rows.spec, None))
        shardings = {"x": x, "n": replicated, "dn": replicated, "rows": rows, "groups": groups}
        accumulator = inv_rms_dtype(x_info.dtype)

        def on_each_device(*operands):
            results = per_shard(*operands, eps, params)
            return tuple(_summed_over_rows(r, row_axes, accumulator) if kind == "dn" else r
                         for r, kind in zip(results, layout.results))

        return (mesh, on_each_device, tuple(shardings[k] for k in layout.results),
                tuple(shardings[k] for k in layout.operands))
    return partition


def _partitioned(description, layout):
    """A custom_partitioning function of the operands of `layout`, then eps and
    the primitive's other parameters (kernels, out_dtype: as sorted (name,
    value) pairs, static and hashable), binding the per-shard primitive of
    `description`."""
    def per_shard(*operands_eps_params):
        *operands, eps, params = operands_eps_params
        return tuple(description.shard.bind(*operands, eps=eps, **dict(params)))

    count = len(layout.operands)
    partitioned = custom_partitioning(per_shard, static_argnums=(count, count + 1))
    partitioned.def_partition(partition=_partition(layout, per_shard),
                              sharding_rule=_sharding_rule(layout))
    return partitioned


def _lowering_through(description):
    """A lowering rule that hands the operands to the custom_partitioning
    function of their layout (``Description.layout_of`` the parameters).

    Inside ``shard_map`` the operands are one device's shards already, so the
    per-shard function is lowered as it is. custom_partitioning does the same
    itself where every mesh axis is manual, but where only some are (a
    ``shard_map`` with ``axis_names``) it would call the partition function
    with shardings that name no mesh axes; XLA then gathers along the axes
    left automatic, if anything is split along them, before the call.
    """
    partitioned = {layout: _partitioned(description, layout)
                   for layout in description.variants().values()}

    def lowering(ctx, *operands, eps, **params):
        manual = getattr(ctx.module_context.axis_context, "manual_axes", ())
        chosen = partitioned[description.layout_of(params)]
        fn = chosen.fun if manual else chosen
        static = tuple(sorted(params.items()))
        return mlir.lower_fun(
            lambda *args: fn(*args, eps, static), multiple_results=True
        )(ctx, *operands)
    return lowering


_PARTITIONED = {p: d for p, d in DESCRIPTIONS.items() if d.shard is not None}
for _primitive, _description in _PARTITIONED.items():
    mlir.register_lowering(_primitive, _lowering_through(_description))

# custom_partitioning needs the device assignment while lowering; jit provides
# it only to computations holding a primitive in this set. JAX adds its own
# custom_partitioning primitive; ours hide it inside their lowering, so they
# are added too (there is no public API for this; TransformerEngine does the same).
dispatch.prim_requires_devices_during_lowering.update(_PARTITIONED)


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
