"""The recipes of the book's Recipes part do what their chapters claim:
state made once per executable, an in-place update without a copy, side
effects kept and ordered, array and dictionary attributes over two dtypes,
a batch-partitionable call without a gather, and exported calls that load.

They run on the platform JAX runs on: the CUDA handlers on a GPU (built
with nvcc), the CPU handlers elsewhere.
"""

import ctypes
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from exercises.build import build_library, nvcc
from recipes import batch_partitionable, effects, kv_cache, polynomial, rope


@pytest.fixture(scope="module")
def libraries():
    built = {name: build_library(f"recipes/{name}", name=f"recipe_{name}")
             for name in ("rope", "kv_cache", "effects", "polynomial")}
    for name, module in (("rope", rope), ("kv_cache", kv_cache), ("effects", effects),
                         ("polynomial", polynomial)):
        module.register(built[name])
    built["batch_partitionable"] = batch_partitionable.register(built["polynomial"])
    return built


def test_the_cuda_handlers_are_built_where_nvcc_is_found_and_run_on_a_gpu(libraries):
    for name in ("rope", "kv_cache", "effects", "polynomial"):
        assert (libraries[name].cuda is not None) == (nvcc() is not None), name
    if jax.default_backend() == "gpu":  # registered for CUDA, or no call would run
        assert all(libraries[name].cuda is not None for name in ("rope", "kv_cache"))


def _rows(seed, shape, dtype=jnp.float32):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), dtype)


def _copies_in(compiled_text):
    return len(re.findall(r"= \S+ copy\(", compiled_text))


# State

def test_rope_table_is_made_once_per_executable_not_per_call(libraries):
    library = libraries["rope"]
    x, positions = _rows(0, (6, 4, 16)), jnp.arange(6, dtype=jnp.int32) * 5
    apply = jax.jit(lambda x, p: rope.rope(library.name, x, p))
    before = rope.tables_made(library)
    for _ in range(3):
        y = apply(x, positions)
    assert rope.tables_made(library) == before + 1
    np.testing.assert_allclose(y, rope.rope_reference(x, positions), rtol=1e-5, atol=1e-5)
    apply(x[:, :3], positions)  # another shape: another executable, another table
    assert rope.tables_made(library) == before + 2
    jax.jit(lambda x, p: rope.rope(library.name, x, p, base=500.0))(x, positions)
    assert rope.tables_made(library) == before + 3


def test_the_cpu_and_the_cuda_library_each_have_a_type_id_of_their_own(libraries):
    # One shared id (an inline static member outside an unnamed namespace is
    # one object per process) crashed the first GPU compile of the op.
    library = libraries["rope"]
    if library.cuda is None:
        pytest.skip("no nvcc: no CUDA library to compare")
    ids = []
    for handlers in (library.cpu, library.cuda):
        handlers.RopeTableTypeId.restype = ctypes.c_void_p
        ids.append(handlers.RopeTableTypeId())
    assert ids[0] != ids[1]


def test_rope_without_the_instantiate_stage_fails_to_find_its_state(libraries):
    library = libraries["rope"]
    name = f"{library.name}_execute_only"
    library.register("RopeExecuteCpu", "RopeExecuteCuda", name=name)
    with pytest.raises(jax.errors.JaxRuntimeError, match="state"):
        jax.block_until_ready(rope.rope(name, _rows(1, (2, 1, 4)), jnp.zeros(2, jnp.int32)))


def test_rope_rejects_what_its_table_cannot_hold(libraries):
    name = libraries["rope"].name
    with pytest.raises(ValueError, match="head_dim"):
        rope.rope(name, _rows(2, (2, 1, 258)), jnp.zeros(2, jnp.int32))
    with pytest.raises(TypeError, match="positions"):
        rope.rope(name, _rows(2, (2, 1, 4)), jnp.zeros(3, jnp.int32))


# In-place updates

def _write(library, in_place, donate):
    return jax.jit(lambda c, r, s: kv_cache.write_row(library.name, c, r, s, in_place=in_place),
                   donate_argnums=(0,) if donate else ())


@pytest.mark.parametrize("in_place, donate, hlo_copies, handler_copies",
                         [(True, True, 0, 0), (True, False, 1, 0), (False, False, 0, 1)],
                         ids=["aliased-donated", "aliased-kept", "not-aliased"])
def test_write_row_copies_the_cache_only_without_aliasing_and_donation(
        libraries, in_place, donate, hlo_copies, handler_copies):
    library = libraries["kv_cache"]
    row = _rows(3, (32,))
    write = _write(library, in_place, donate)
    cache = jnp.zeros((8, 32), jnp.float32)
    assert _copies_in(write.lower(cache, row, jnp.int32(0)).compile().as_text()) == hlo_copies
    before = kv_cache.whole_cache_copies(library)
    for slot in (2, -3, -12, 11):  # from the end; clamped to the first, the last
        expected = jax.lax.dynamic_update_slice(cache, (row + slot)[None], (jnp.int32(slot), jnp.int32(0)))
        cache = write(cache, row + slot, jnp.int32(slot))
        np.testing.assert_array_equal(cache, expected)
    assert kv_cache.whole_cache_copies(library) - before == 4 * handler_copies


def test_write_row_rejects_a_row_of_another_width(libraries):
    with pytest.raises(TypeError, match="row"):
        kv_cache.write_row(libraries["kv_cache"].name, jnp.zeros((4, 8)).astype(jnp.float32),
                           jnp.zeros(7, jnp.float32), jnp.int32(0))


# Side effects

def _six_steps(library, has_side_effect, chained):
    def step(x):
        done = None
        for tag in range(6):
            x = jnp.sin(x) + tag
            result = effects.log_event(library.name, x, tag, done if chained else None,
                                       has_side_effect=has_side_effect)
            done = result
        return x
    return jax.jit(step)


def test_an_unmarked_call_whose_result_is_unused_is_removed(libraries):
    library = libraries["effects"]
    effects.events(library)
    apply = _six_steps(library, has_side_effect=False, chained=True)
    jax.block_until_ready(apply(jnp.ones(3)))
    assert effects.events(library) == []
    assert "custom-call(" not in apply.lower(jnp.ones(3)).compile().as_text()


def test_marked_calls_are_kept_and_chained_ones_keep_their_order(libraries):
    library = libraries["effects"]
    effects.events(library)
    jax.block_until_ready(_six_steps(library, has_side_effect=True, chained=False)(jnp.ones(3)))
    assert sorted(effects.events(library)) == list(range(6))
    for _ in range(2):
        jax.block_until_ready(_six_steps(library, has_side_effect=True, chained=True)(jnp.ones(3)))
        assert effects.events(library) == list(range(6))


# Attributes and dtypes

@pytest.mark.parametrize("dtype", polynomial.DTYPES, ids=lambda d: d.__name__)
def test_polynomial_reads_array_and_dictionary_attributes(libraries, dtype):
    coefficients, low, high = [0.1, 0.5, 0.25, -0.02], -1.0, 2.0
    x = _rows(4, (5, 33), dtype) * 3
    y = jax.jit(lambda x: polynomial.polynomial(libraries["polynomial"].name, x, coefficients,
                                                low, high))(x)
    assert y.dtype == dtype
    expected = polynomial.polynomial_reference(x, coefficients, low, high)
    # a GPU fuses Horner's multiply and add: float32 results differ in the last bits
    np.testing.assert_allclose(y.astype(np.float32), expected.astype(np.float32),
                               rtol=polynomial.TOLERANCE[dtype], atol=polynomial.TOLERANCE[dtype])
    assert float(y.max()) == high and float(y.min()) >= low


def test_the_handler_checks_attribute_types_and_keys(libraries):
    x = jnp.ones((2, 3), jnp.float32)
    call = jax.ffi.ffi_call(libraries["polynomial"].name, jax.ShapeDtypeStruct(x.shape, x.dtype))
    with pytest.raises(jax.errors.JaxRuntimeError, match="expected F32 but got S32"):
        jax.block_until_ready(call(x, coefficients=np.array([1, 2], np.int32),
                                   clip={"low": -1.0, "high": 1.0}))
    with pytest.raises(jax.errors.JaxRuntimeError, match="high"):
        jax.block_until_ready(call(x, coefficients=np.array([1, 2], np.float32),
                                   clip={"low": -1.0}))
    half = jax.ffi.ffi_call(libraries["polynomial"].name,
                            jax.ShapeDtypeStruct(x.shape, jnp.float16))
    with pytest.raises(jax.errors.JaxRuntimeError, match="float32 or bfloat16"):
        jax.block_until_ready(half(x.astype(jnp.float16), coefficients=np.ones(2, np.float32),
                                   clip={"low": -1.0, "high": 1.0}))


def test_polynomial_rejects_bad_arguments_in_python(libraries):
    name = libraries["polynomial"].name
    with pytest.raises(TypeError, match="x must be float32 or bfloat16"):
        polynomial.polynomial(name, jnp.ones(3, jnp.float16), [1.0])
    with pytest.raises(ValueError, match="coefficients"):
        polynomial.polynomial(name, jnp.ones(3, jnp.float32), np.ones(17))
    with pytest.raises(ValueError, match="low"):
        polynomial.polynomial(name, jnp.ones(3, jnp.float32), [1.0], 2.0, 1.0)
    with pytest.raises(TypeError, match="x must be float32 or bfloat16"):
        polynomial.polynomial(name, [1, 2, 3], [1.0])  # a list of ints: int32 (or int64)
    with pytest.raises(ValueError, match="1 to 8 axes"):
        batch_partitionable.polynomial_rows(libraries["batch_partitionable"],
                                            jnp.float32(1.0), [1.0])


# Batch partitioning

def _mesh():
    return jax.make_mesh((8,), ("rows",), devices=jax.devices("cpu")[:8])


@pytest.mark.parametrize("registered, described, gathers", [
    (True, True, False), (False, True, True), (True, False, True), (False, False, True)])
def test_only_a_registered_and_described_call_runs_on_its_rows(
        libraries, registered, described, gathers):
    target = libraries["batch_partitionable"] if registered else libraries["polynomial"].name
    coefficients = [0.0, 1.0, 0.5]
    x = jax.device_put(_rows(5, (16, 64)), NamedSharding(_mesh(), PartitionSpec("rows")))
    apply = jax.jit(lambda x: batch_partitionable.polynomial_rows(
        target, x, coefficients, describe_batch=described))
    compiled = apply.lower(x).compile().as_text()
    assert ("all-gather" in compiled) == gathers
    (call,) = [line for line in compiled.splitlines() if "custom-call(" in line]
    assert ("f32[16,64]" if gathers else "f32[2,64]") in call.split("custom-call(")[0]
    np.testing.assert_array_equal(apply(x), polynomial.polynomial_reference(x, coefficients))


def test_a_sharded_last_axis_is_gathered_whole(libraries):
    x = jax.device_put(_rows(6, (16, 64)), NamedSharding(_mesh(), PartitionSpec(None, "rows")))
    apply = jax.jit(lambda x: batch_partitionable.polynomial_rows(
        libraries["batch_partitionable"], x, [0.0, 1.0, 0.5]))
    (call,) = [line for line in apply.lower(x).compile().as_text().splitlines()
               if "custom-call(" in line]
    assert "f32[16,64]" in call.split("custom-call(")[0]
    np.testing.assert_array_equal(apply(x), polynomial.polynomial_reference(x, [0.0, 1.0, 0.5]))


# Export

def test_an_exported_call_loads_and_runs_and_needs_its_target_allowed(libraries):
    name = libraries["polynomial"].name
    x = _rows(7, (4, 8))
    apply = jax.jit(lambda x: polynomial.polynomial(name, x, [0.0, 2.0], -1.0, 1.0))
    with pytest.raises(ValueError, match="custom call"):
        jax.export.export(apply)(x)
    exported = jax.export.export(
        apply, disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(name)])(x)
    assert f"@{name}" in exported.mlir_module()
    loaded = jax.export.deserialize(exported.serialize())
    np.testing.assert_array_equal(loaded.call(x), apply(x))
