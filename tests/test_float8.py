"""The norm's output quantised to float8_e4m3fn for the next matmul, a
float32 scale per group of 128 values of a row (rms_norm_fp8), and the same
dequantised with a straight-through gradient (rms_norm_through_fp8)."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import gpu_ops
import reference
from gpu_ops import float8
from reference import DTYPES, TOLERANCE


def _inputs(shape, dtype, weight_dtype=None, seed=0):
    kx, kw, kd = jax.random.split(jax.random.key(seed), 3)
    x = (jax.random.normal(kx, shape, jnp.float32) * 3).astype(dtype)
    weight = (1 + 0.5 * jax.random.normal(kw, shape[-1:], jnp.float32)).astype(
        weight_dtype or dtype)
    dy = jax.random.normal(kd, shape, jnp.float32).astype(weight.dtype)
    return x, weight, dy


def _assert_same_quantised(got, want, implementation):
    """Equal, for the kernels' quantisation; where XLA quantises (HiJAX and
    Pallas routes), its conversion to float8 may round a value the other
    way in one compiled function and not in another: at most one float8
    step apart, and rarely."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    if implementation == "ffi":
        np.testing.assert_array_equal(got, want)
        return
    assert np.mean(got != want) < 0.02
    np.testing.assert_allclose(got, want, rtol=2.0**-3, atol=2.0**-9 * np.abs(want).max())


def _check_quantised(values, scales, x, weight, implementation):
    """values and scales are the float64 reference y's, to rounding: of y
    computed in float32 (float64 for float64 x) in the kernel, or in the
    weight's dtype where jnp quantises the y of another implementation."""
    assert values.dtype == jnp.float8_e4m3fn and values.shape == x.shape
    assert scales.dtype == jnp.float32 and scales.shape == (*x.shape[:-1], x.shape[-1] // 128)
    y = reference.forward(x, weight).reshape(*scales.shape, 128)
    largest = np.abs(y).max(axis=-1)
    expected_scales = np.where(largest > 0, largest / 448, 1.0)
    accumulator = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
    y_dtypes = [accumulator] + ([] if implementation == "ffi" else [weight.dtype])
    # and the scales are float32
    tol = max(TOLERANCE[jnp.dtype(t)] for t in (*y_dtypes, jnp.float32))
    np.testing.assert_allclose(scales, expected_scales, rtol=tol)
    q = np.asarray(values).astype(np.float64).reshape(y.shape)
    assert np.all(np.abs(q) <= 448)
    np.testing.assert_allclose(np.abs(q).max(axis=-1)[largest > 0], 448, rtol=1e-2)
    # within half a float8 step of y / scale: 2**-4 of it, or of the
    # smallest normal, 2**-6, below that; and y's own rounding
    v = y / expected_scales[..., None]
    bound = 2.0**-4 * np.maximum(np.abs(v), 2.0**-6) + 2 * tol * np.maximum(np.abs(v), 1)
    assert np.all(np.abs(q - v) <= bound), np.max(np.abs(q - v) - bound)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 3, 256), (1, 128), (7, 1024)], ids=str)
def test_values_and_scales_are_the_float64_references(shape, dtype, implementation):
    x, weight, _ = _inputs(shape, dtype)
    _check_quantised(*gpu_ops.rms_norm_fp8(x, weight), x, weight, implementation)


def test_a_weight_of_another_dtype_and_jit(implementation):
    x, weight, _ = _inputs((9, 384), jnp.bfloat16, jnp.float32, seed=1)
    _check_quantised(*jax.jit(gpu_ops.rms_norm_fp8)(x, weight), x, weight, implementation)


def test_a_group_of_zeros_has_scale_one(implementation):
    x = jnp.zeros((2, 256), jnp.float32).at[1, 128:].set(1.0)
    values, scales = gpu_ops.rms_norm_fp8(x, jnp.ones(256, jnp.float32))
    np.testing.assert_array_equal(scales[:, 0], [1.0, 1.0])
    np.testing.assert_array_equal(np.asarray(values[:, :128], np.float32), 0)


def test_the_cpu_rounding_is_float8s_own(implementation):
    if implementation != "ffi" or jax.default_backend() != "cpu":
        pytest.skip("the C++ kernel's conversion to float8")
    # y / scale over every float8 value, the midpoints between them (ties go
    # to the even one) and the float32 values just beside those, a group of
    # them a row. (From float32: ml_dtypes converts float64 through float32,
    # rounding twice.)
    finite = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    finite = np.unique(finite[np.isfinite(finite)].astype(np.float32))
    middles = (finite[1:] + finite[:-1]) / 2
    targets = np.concatenate([finite, middles, np.nextafter(middles, np.float32(np.inf)),
                              np.nextafter(middles, np.float32(-np.inf))])
    targets = np.concatenate([targets, np.zeros(-len(targets) % 128, np.float32)])
    targets = targets.reshape(-1, 128)
    targets[:, 0] = 448.0  # every group's largest: its scale is 1
    # rows of ones and eps 0: inv_rms is 1 and y the weight, exactly
    x = jnp.ones((1, 128), jnp.float32)
    for row in targets:
        values, scales = gpu_ops.rms_norm_fp8(x, jnp.asarray(row), 0.0)
        assert float(scales[0, 0]) == 1.0
        expected = row.astype(ml_dtypes.float8_e4m3fn)
        np.testing.assert_array_equal(np.asarray(values[0]).view(np.uint8),
                                      expected.view(np.uint8))


def test_the_straight_through_gradient_is_the_norms(implementation):
    x, weight, dy = _inputs((6, 256), jnp.float32, seed=2)
    y, pullback = jax.vjp(gpu_ops.rms_norm_through_fp8, x, weight)
    values, scales = gpu_ops.rms_norm_fp8(x, weight)
    np.testing.assert_allclose(y, float8.dequantize(values, scales), rtol=1e-6)
    dx, dweight = pullback(dy)
    expected_dx, expected_dweight = jax.vjp(gpu_ops.rms_norm, x, weight)[1](dy)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dweight, expected_dweight, rtol=1e-6, atol=1e-6)


def test_quantised_values_have_no_gradient(implementation):
    x, weight, _ = _inputs((2, 128), jnp.float32)
    with pytest.raises(TypeError, match="rms_norm_through_fp8"):
        jax.grad(lambda x: jnp.sum(gpu_ops.rms_norm_fp8(x, weight)[1]))(x)


@pytest.mark.parametrize("in_axes", [(0, None), (1, None), (0, 0)], ids=str)
def test_vmap_is_a_loop_over_examples(in_axes, implementation):
    x, weight, _ = _inputs((3, 4, 256), jnp.float32, seed=3)
    weights = jnp.stack([weight * (1 + k) for k in range(3)])
    args = (x if in_axes[0] == 0 else jnp.moveaxis(x, 0, 1),
            weight if in_axes[1] is None else weights)
    got = jax.jit(jax.vmap(gpu_ops.rms_norm_fp8, in_axes=in_axes))(*args)
    for k in range(3):
        want = gpu_ops.rms_norm_fp8(x[k], weight if in_axes[1] is None else weights[k])
        for g, w in zip(got, want):
            _assert_same_quantised(g[k], w, implementation)


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit])
@pytest.mark.parametrize("spec", [P("data"), P(None, "data"), P(None, None, "data")], ids=str)
def test_sharded_rows_give_the_one_device_answer(spec, axis_type, implementation):
    devices = jax.devices() if len(jax.devices()) >= 2 else jax.devices("cpu")
    mesh = jax.sharding.Mesh(np.array(devices[:4]), ("data",), axis_types=(axis_type,))
    x, weight, dy = _inputs((8, 4, 256), jnp.float32, seed=4)
    sharded = jax.device_put(x, NamedSharding(mesh, spec))
    single = jax.device_put(x, devices[0]), jax.device_put(weight, devices[0])
    with jax.set_mesh(mesh):
        values, scales = jax.jit(gpu_ops.rms_norm_fp8)(sharded, weight)
        hlo = jax.jit(gpu_ops.rms_norm_fp8).lower(sharded, weight).compile().as_text()
        grads = jax.jit(jax.grad(lambda x, w: jnp.sum(gpu_ops.rms_norm_through_fp8(x, w) * dy),
                                 argnums=(0, 1)))(sharded, weight)
    if spec[0] is not None or spec[1] is not None:  # rows split: none gathered
        assert "all-gather" not in hlo and "all-to-all" not in hlo
    want = gpu_ops.rms_norm_fp8(*single)
    _assert_same_quantised(values, want[0], implementation)
    np.testing.assert_array_equal(scales, want[1])
    want_grads = jax.grad(lambda x, w: jnp.sum(gpu_ops.rms_norm_through_fp8(x, w) * dy),
                          argnums=(0, 1))(*single)
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scaled", [False, True], ids=["group scales", "a given scale"])
def test_export_with_a_symbolic_batch(scaled, implementation):
    from jax import export

    (batch,) = export.symbolic_shape("b")
    checks = [export.DisabledSafetyCheck.custom_call(name)
              for name in ("gpu_ops_rms_norm_fwd", "gpu_ops_rms_norm_fp8_fwd")]

    def fp8(x, weight, scale):
        return gpu_ops.rms_norm_fp8(x, weight, scale=scale)

    export_it = export.export(jax.jit(fp8), platforms=["cpu", "cuda"], disabled_checks=checks)
    scale_type = jax.ShapeDtypeStruct((), jnp.float32) if scaled else None
    types = (jax.ShapeDtypeStruct((batch, 256), jnp.float32),
             jax.ShapeDtypeStruct((256,), jnp.float32), scale_type)
    if implementation == "pallas":
        with pytest.raises(NotImplementedError, match="implementation='pallas'.*symbolic"):
            export_it(*types)
        return
    restored = export.deserialize(export_it(*types).serialize())
    x, weight, _ = _inputs((5, 256), jnp.float32, seed=13 if scaled else 5)
    scale = jnp.float32(0.02) if scaled else None
    for got, want in zip(restored.call(x, weight, scale), fp8(x, weight, scale)):
        _assert_same_quantised(got, want, implementation)


@pytest.mark.ffi_lowering
@pytest.mark.parametrize("platform", ["cpu", "cuda"])
@pytest.mark.parametrize("scaled", [False, True], ids=["group scales", "a given scale"])
def test_one_custom_call_normalises_and_quantises(platform, scaled, implementation):
    x, weight, _ = _inputs((4, 256), jnp.bfloat16)
    scale = jnp.float32(0.5) if scaled else None
    text = jax.jit(lambda x, s: gpu_ops.rms_norm_fp8(x, weight, scale=s)).trace(
        x, scale).lower(lowering_platforms=(platform,)).as_text()
    (call,) = [line for line in text.splitlines() if "stablehlo.custom_call" in line]
    if implementation == "hijax":  # the HiJAX primitive's y, quantised by XLA
        assert "@gpu_ops_rms_norm_fwd(" in call and "f8E4M3FN" in text
        return
    # with a given scale, its column of rows is one more operand, and the
    # attribute scaled says so
    row_scales = ", tensor<4xf32>" if scaled else ""
    assert "@gpu_ops_rms_norm_fp8_fwd(" in call
    assert "residual = false" in call and f"scaled = {str(scaled).lower()}" in call
    assert (f"(tensor<4x256xbf16>, tensor<256xbf16>{row_scales}) -> "
            f"(tensor<4x256xf8E4M3FN>, tensor<4xf32>, tensor<4x2xf32>)") in call


@pytest.mark.parametrize("weight_shape", [(2, 128), (100,)], ids=str)
def test_weights_without_whole_groups_are_a_clear_error(weight_shape, implementation):
    x = jnp.ones((3, *weight_shape))
    with pytest.raises(ValueError, match="multiple of 128"):
        gpu_ops.rms_norm_fp8(x, jnp.ones(weight_shape))
    with pytest.raises(ValueError, match="multiple of 128"):
        gpu_ops.rms_norm_through_fp8(x, jnp.ones(weight_shape))


# With a residual: "add the residual, normalise, quantise", in one kernel pass.
def _residual_inputs(seed=6):
    x, weight, dy = _inputs((6, 2, 256), jnp.bfloat16, seed=seed)
    residual = jax.random.normal(jax.random.key(seed + 1), x.shape, jnp.float32).astype(x.dtype)
    return x, weight, residual, dy


def test_with_a_residual_it_quantises_the_sum(implementation):
    x, weight, residual, _ = _residual_inputs()
    values, scales, total = jax.jit(lambda *a: gpu_ops.rms_norm_fp8(
        a[0], a[1], residual=a[2]))(x, weight, residual)
    np.testing.assert_array_equal(total, x + residual)
    expected_values, expected_scales = gpu_ops.rms_norm_fp8(total, weight)
    _assert_same_quantised(values, expected_values, implementation)
    np.testing.assert_array_equal(scales, expected_scales)


def test_with_a_residual_the_gradient_is_the_residual_norms(implementation):
    x, weight, residual, dy = _residual_inputs(seed=7)
    dtotal = jnp.flip(x, axis=-1)

    def through(x, weight, residual):
        return gpu_ops.rms_norm_through_fp8(x, weight, residual=residual)

    def plain(x, weight, residual):
        return gpu_ops.rms_norm(x, weight, residual=residual)

    (y, total), pullback = jax.vjp(through, x, weight, residual)
    values, scales, _ = gpu_ops.rms_norm_fp8(x, weight, residual=residual)
    _assert_same_quantised(y, float8.dequantize(values, scales, weight.dtype), implementation)
    np.testing.assert_array_equal(total, x + residual)
    want = jax.vjp(plain, x, weight, residual)[1]((dy, dtotal))
    for got, expected in zip(pullback((dy, dtotal)), want):
        np.testing.assert_array_equal(np.asarray(got, np.float32),
                                      np.asarray(expected, np.float32))


@pytest.mark.parametrize("in_axes", [(0, None, 0), (0, None, None), (None, None, 0)], ids=str)
def test_with_a_residual_vmap_is_a_loop(in_axes, implementation):
    x, weight, residual, _ = _residual_inputs(seed=8)

    def fp8(x, weight, residual):
        return gpu_ops.rms_norm_fp8(x, weight, residual=residual)

    args = [x, weight, residual]
    batched = [a if axis is None else jnp.stack([a, -a, 2 * a]) for a, axis in
               zip(args, in_axes)]
    got = jax.jit(jax.vmap(fp8, in_axes=in_axes))(*batched)
    for k in range(3):
        example = [a if axis is None else b[k] for a, b, axis in zip(args, batched, in_axes)]
        for g, w in zip(got, fp8(*example)):
            _assert_same_quantised(g[k], w, implementation)


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit])
def test_with_a_residual_sharded_rows_give_the_one_device_answer(axis_type, implementation):
    devices = jax.devices() if len(jax.devices()) >= 2 else jax.devices("cpu")
    mesh = jax.sharding.Mesh(np.array(devices[:2]), ("data",), axis_types=(axis_type,))
    x, weight, residual, _ = _residual_inputs(seed=9)
    sharding = NamedSharding(mesh, P("data"))
    args = (jax.device_put(x, sharding), weight, jax.device_put(residual, sharding))

    def fp8(x, weight, residual):
        return gpu_ops.rms_norm_fp8(x, weight, residual=residual)

    with jax.set_mesh(mesh):
        got = jax.jit(fp8)(*args)
        hlo = jax.jit(fp8).lower(*args).compile().as_text()
    assert "all-gather" not in hlo and "all-to-all" not in hlo
    for g, w in zip(got, fp8(*(jax.device_put(a, devices[0]) for a in (x, weight, residual)))):
        _assert_same_quantised(g, w, implementation)


@pytest.mark.ffi_lowering
def test_with_a_residual_one_custom_call_adds_normalises_and_quantises(implementation):
    if implementation == "hijax":
        pytest.skip("the HiJAX route's sum and quantisation are XLA's")
    x, weight, residual, _ = _residual_inputs()
    text = jax.jit(lambda *a: gpu_ops.rms_norm_fp8(a[0], a[1], residual=a[2])).trace(
        x, weight, residual).lower(lowering_platforms=("cuda",)).as_text()
    (call,) = [line for line in text.splitlines() if "stablehlo.custom_call" in line]
    assert "@gpu_ops_rms_norm_fp8_fwd(" in call and "residual = true" in call
    assert "stablehlo.add" not in text


def test_a_residual_unlike_x_is_a_clear_error(implementation):
    x, weight, residual, _ = _residual_inputs()
    with pytest.raises(TypeError, match="residual must have x's dtype"):
        gpu_ops.rms_norm_fp8(x, weight, residual=residual.astype(jnp.float32))
    with pytest.raises(ValueError, match="residual must have x's shape"):
        gpu_ops.rms_norm_through_fp8(x, weight, residual=residual[0])


# One scale given for the whole tensor (delayed scaling): values y / scale,
# and y's largest magnitude for the next scale.
def _check_scaled(values, amax, x, weight, scale, implementation):
    """values are the float64 reference y / scale to rounding (saturating at
    448), and amax its largest |y|, to y's rounding: in float32 (float64 for
    float64 x) in the kernel, in the weight's dtype where jnp quantises."""
    assert values.dtype == jnp.float8_e4m3fn and values.shape == x.shape
    assert amax.dtype == jnp.float32 and amax.shape == ()
    y = reference.forward(x, weight)
    accumulator = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
    y_dtypes = [accumulator] + ([] if implementation == "ffi" else [weight.dtype])
    tol = max(TOLERANCE[jnp.dtype(t)] for t in (*y_dtypes, jnp.float32))
    np.testing.assert_allclose(amax, np.abs(y).max(), rtol=tol)
    q = np.asarray(values).astype(np.float64)
    v = np.clip(y / scale, -448, 448)
    bound = 2.0**-4 * np.maximum(np.abs(v), 2.0**-6) + 2 * tol * np.maximum(np.abs(v), 1)
    assert np.all(np.abs(q - v) <= bound), np.max(np.abs(q - v) - bound)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 3, 256), (128,), (7, 1024)], ids=str)
def test_a_given_scale_divides_every_value(shape, dtype, implementation):
    x, weight, _ = _inputs(shape, dtype)
    scale = 0.01
    values, amax = gpu_ops.rms_norm_fp8(x, weight, scale=scale)
    _check_scaled(values, amax, x, weight, scale, implementation)


def test_a_scale_too_small_saturates_at_448(implementation):
    x, weight, _ = _inputs((4, 256), jnp.float32, seed=9)
    values, amax = jax.jit(lambda x, s: gpu_ops.rms_norm_fp8(x, weight, scale=s))(x, 1e-4)
    q = np.abs(np.asarray(values, np.float32))
    assert np.all(np.isfinite(q)) and q.max() == 448
    _check_scaled(values, amax, x, weight, 1e-4, implementation)


def test_a_given_scale_with_a_residual_quantises_the_sum(implementation):
    x, weight, residual, _ = _residual_inputs(seed=10)
    values, amax, total = jax.jit(lambda x, r: gpu_ops.rms_norm_fp8(
        x, weight, residual=r, scale=0.02))(x, residual)
    np.testing.assert_array_equal(total, x + residual)
    want_values, want_amax = gpu_ops.rms_norm_fp8(total, weight, scale=0.02)
    _assert_same_quantised(values, want_values, implementation)
    assert amax == want_amax


@pytest.mark.parametrize("scale_axis", [None, 0], ids=["one scale", "a scale each"])
def test_a_given_scale_under_vmap_is_each_examples_own(scale_axis, implementation):
    x, weight, _ = _inputs((3, 4, 256), jnp.float32, seed=11)
    scales = jnp.array([0.01, 0.02, 0.04])

    def fp8(x, scale):
        return gpu_ops.rms_norm_fp8(x, weight, scale=scale)

    got = jax.jit(jax.vmap(fp8, in_axes=(0, scale_axis)))(
        x, scales if scale_axis == 0 else scales[0])
    for k in range(3):
        values, amax = fp8(x[k], scales[k] if scale_axis == 0 else scales[0])
        _assert_same_quantised(got[0][k], values, implementation)
        assert got[1][k] == amax


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit])
@pytest.mark.parametrize("spec", [P("data"), P(None, "data")], ids=str)
def test_a_given_scale_on_sharded_rows_gives_the_one_device_answer(spec, axis_type,
                                                                    implementation):
    devices = jax.devices() if len(jax.devices()) >= 2 else jax.devices("cpu")
    mesh = jax.sharding.Mesh(np.array(devices[:4]), ("data",), axis_types=(axis_type,))
    x, weight, _ = _inputs((8, 4, 256), jnp.float32, seed=12)
    sharded = jax.device_put(x, NamedSharding(mesh, spec))

    def fp8(x, weight):
        return gpu_ops.rms_norm_fp8(x, weight, scale=0.01)

    with jax.set_mesh(mesh):
        values, amax = jax.jit(fp8)(sharded, weight)
        hlo = jax.jit(fp8).lower(sharded, weight).compile().as_text()
    assert "all-gather" not in hlo and "all-to-all" not in hlo  # rows stay split
    want = fp8(jax.device_put(x, devices[0]), jax.device_put(weight, devices[0]))
    _assert_same_quantised(values, want[0], implementation)
    assert float(amax) == float(want[1])  # the largest |y| of every device's rows


def test_a_given_scale_has_no_gradient(implementation):
    x, weight, _ = _inputs((2, 128), jnp.float32)
    with pytest.raises(TypeError, match="rms_norm_through_fp8"):
        jax.grad(lambda x: gpu_ops.rms_norm_fp8(x, weight, scale=0.1)[1])(x)


@pytest.mark.parametrize("scale,error,message", [
    ("0.1", TypeError, "real number"), (True, TypeError, "real number"),
    (jnp.ones((), jnp.int32), TypeError, "floating-point"),
    (jnp.ones(2), ValueError, "one number"), (0.0, ValueError, "positive"),
    (-1.0, ValueError, "positive"), (float("inf"), ValueError, "finite"),
], ids=["str", "bool", "int array", "vector", "zero", "negative", "inf"])
def test_a_bad_scale_is_a_clear_error(scale, error, message, implementation):
    x, weight, _ = _inputs((2, 128), jnp.float32)
    with pytest.raises(error, match=f"scale.*{message}|{message}.*scale"):
        gpu_ops.rms_norm_fp8(x, weight, scale=scale)


def test_through_a_given_scale_the_gradient_is_the_norms(implementation):
    x, weight, dy = _inputs((6, 256), jnp.float32, seed=14)

    def through(x, weight, scale):
        return gpu_ops.rms_norm_through_fp8(x, weight, scale=scale)

    (y, amax), pullback = jax.vjp(through, x, weight, jnp.float32(0.01))
    values, want_amax = gpu_ops.rms_norm_fp8(x, weight, scale=0.01)
    np.testing.assert_array_equal(y, np.asarray(values, np.float32) * np.float32(0.01))
    assert float(amax) == float(want_amax)
    dx, dweight, dscale = pullback((dy, jnp.float32(1.0)))  # amax passes no gradient on
    expected_dx, expected_dweight = jax.vjp(gpu_ops.rms_norm, x, weight)[1](dy)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dweight, expected_dweight, rtol=1e-6, atol=1e-6)
    assert float(dscale) == 0.0


def test_through_a_given_scale_with_a_residual(implementation):
    x, weight, residual, dy = _residual_inputs(seed=15)
    dtotal = jnp.flip(x, axis=-1)

    def through(x, weight, residual):
        return gpu_ops.rms_norm_through_fp8(x, weight, residual=residual, scale=0.02)

    def plain(x, weight, residual):
        return gpu_ops.rms_norm(x, weight, residual=residual)

    (y, amax, total), pullback = jax.vjp(jax.jit(through), x, weight, residual)
    values, want_amax, _ = gpu_ops.rms_norm_fp8(x, weight, residual=residual, scale=0.02)
    read_back = (np.asarray(values, np.float32) * np.float32(0.02)).astype(weight.dtype)
    _assert_same_quantised(y, read_back, implementation)
    np.testing.assert_array_equal(total, x + residual)
    assert float(amax) == float(want_amax)
    want = jax.vjp(plain, x, weight, residual)[1]((dy, dtotal))
    for got, expected in zip(pullback((dy, jnp.float32(0.0), dtotal)), want):
        np.testing.assert_array_equal(np.asarray(got, np.float32),
                                      np.asarray(expected, np.float32))


def test_through_a_given_scale_on_sharded_rows(implementation):
    devices = jax.devices() if len(jax.devices()) >= 2 else jax.devices("cpu")
    mesh = jax.sharding.Mesh(np.array(devices[:4]), ("data",), axis_types=(AxisType.Auto,))
    x, weight, dy = _inputs((8, 4, 256), jnp.float32, seed=16)
    sharded = jax.device_put(x, NamedSharding(mesh, P("data")))

    def loss(x, weight):
        y, amax = gpu_ops.rms_norm_through_fp8(x, weight, scale=0.01)
        return jnp.sum(y * dy), amax

    with jax.set_mesh(mesh):
        (_, amax), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(
            sharded, weight)
    single = jax.device_put(x, devices[0]), jax.device_put(weight, devices[0])
    (_, want_amax), want_grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(*single)
    assert float(amax) == float(want_amax)
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("residual", [False, True], ids=["alone", "with_residual"])
@pytest.mark.parametrize("scale", [None, 0.02], ids=["grouped", "given_scale"])
def test_read_back_in_float32_is_exact_and_its_gradient_the_norms(scale, residual,
                                                                  implementation):
    x, weight, dy = _inputs((6, 256), jnp.bfloat16, seed=17)
    extra = {"residual": jnp.flip(x, axis=0)} if residual else {}
    options = {**extra, **({} if scale is None else {"scale": scale})}

    def y_of(x, weight, **dtype):
        out = gpu_ops.rms_norm_through_fp8(x, weight, **options, **dtype)
        return out if scale is None and not residual else out[0]

    wide, wide_pullback = jax.vjp(lambda x, w: y_of(x, w, dtype=jnp.float32), x, weight)
    narrow, narrow_pullback = jax.vjp(y_of, x, weight)
    assert wide.dtype == jnp.float32 and narrow.dtype == weight.dtype
    # the values times their scales, unrounded in float32 (to the last bit
    # where jnp quantises: its scales are XLA's float32 division, in another
    # compiled function), round to the default's y
    values, scales, *_ = gpu_ops.rms_norm_fp8(x, weight, **options)
    read_back = (float8.dequantize(values, scales) if scale is None
                 else np.asarray(values, np.float32) * np.float32(scale))
    if implementation == "ffi":
        np.testing.assert_array_equal(wide, read_back)
    else:
        _assert_same_quantised(np.float32(wide).round(5), np.float32(read_back).round(5),
                               implementation)
    np.testing.assert_array_equal(np.asarray(wide.astype(weight.dtype), np.float32),
                                  np.asarray(narrow, np.float32))
    # y's float32 gradient enters the norm's backward in the weight's dtype
    for got, want in zip(wide_pullback(dy.astype(jnp.float32)), narrow_pullback(dy)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


@pytest.mark.parametrize("dtype", ["int8", jnp.float8_e4m3fn, 3, "no such type"], ids=str)
def test_a_bad_read_back_dtype_is_a_clear_error(dtype, implementation):
    x, weight, _ = _inputs((2, 128), jnp.float32)
    with pytest.raises(TypeError, match="rms_norm_through_fp8: dtype must be"):
        gpu_ops.rms_norm_through_fp8(x, weight, dtype=dtype)
