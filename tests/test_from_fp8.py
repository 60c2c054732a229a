"""The norm of a float8 input: float8_e4m3fn values with a float32 scale per
group of 128 values of a row (rms_norm_from_fp8), and of x quantised to them
with its gradient passed straight through the quantisation
(rms_norm_through_fp8_input)."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import gpu_ops
import reference
from gpu_ops import ffi_targets, float8
from reference import TOLERANCE

WEIGHT_DTYPES = [jnp.float16, jnp.bfloat16, jnp.float32]


def _inputs(shape, dtype=jnp.float32, weight_dtype=None, seed=0):
    """x, its float8 values and scales, a weight and a cotangent dy."""
    kx, kw, kd = jax.random.split(jax.random.key(seed), 3)
    x = (jax.random.normal(kx, shape, jnp.float32) * 3).astype(dtype)
    weight = (1 + 0.5 * jax.random.normal(kw, shape[-1:], jnp.float32)).astype(
        weight_dtype or dtype)
    dy = jax.random.normal(kd, shape, jnp.float32).astype(weight.dtype)
    values, scales = float8.quantize(x)
    return x, values, scales, weight, dy


def _read_back(values, scales):
    """The x that values and scales stand for, as the kernels compute it:
    in float32 (then exactly in float64)."""
    return np.asarray(float8.dequantize(values, scales)).astype(np.float64)


def _assert_close(got, want, dtype):
    """got (of `dtype`) is want, to its rounding after float32 arithmetic."""
    want = np.asarray(want)
    tol = max(TOLERANCE[jnp.dtype(dtype)], TOLERANCE[jnp.dtype(jnp.float32)])
    assert got.dtype == dtype
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol,
                               atol=tol * np.abs(want).max())


@pytest.mark.parametrize("weight_dtype", WEIGHT_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(5, 3, 256), (1, 128), (7, 1024)], ids=str)
def test_y_is_the_float64_norm_of_the_read_back(shape, weight_dtype, implementation):
    _, values, scales, weight, _ = _inputs(shape, weight_dtype=weight_dtype)
    want = reference.forward(_read_back(values, scales), weight)
    _assert_close(gpu_ops.rms_norm_from_fp8(values, scales, weight), want, weight_dtype)
    _assert_close(jax.jit(gpu_ops.rms_norm_from_fp8)(values, scales, weight), want,
                  weight_dtype)


def test_every_float8_value_reads_back_exactly(implementation):
    # All 254 finite bit patterns (subnormals and +-448 included) and two
    # zeros, in one row of 256: with scale 1 and a weight of ones, y is the
    # row over its RMS, so a pattern the kernel decoded wrongly shows.
    bits = np.arange(256, dtype=np.uint8)
    bits[[0x7f, 0xff]] = 0  # the NaNs
    values = jnp.asarray(bits.view(ml_dtypes.float8_e4m3fn)[None])
    scales = jnp.ones((1, 2), jnp.float32)
    weight = jnp.ones(256, jnp.float32)
    x = bits.view(ml_dtypes.float8_e4m3fn).astype(np.float64)[None]
    got = gpu_ops.rms_norm_from_fp8(values, scales, weight, 0.0)
    np.testing.assert_allclose(got, reference.forward(x, weight, 0.0), rtol=2e-6, atol=1e-9)


@pytest.mark.parametrize("x_dtype,weight_dtype", [(jnp.float32, jnp.float32),
                                                  (jnp.bfloat16, jnp.bfloat16),
                                                  (jnp.float16, jnp.float32)], ids=str)
def test_the_gradient_is_the_norms_at_the_read_back(x_dtype, weight_dtype, implementation):
    """Straight through: x's gradient is the norm's gradient at the x that
    the float8 values stand for, not at x (the two differ by up to 2**-4)."""
    x, values, scales, weight, dy = _inputs((6, 384), x_dtype, weight_dtype, seed=2)
    y, pullback = jax.vjp(gpu_ops.rms_norm_through_fp8_input, x, weight)
    read_back = _read_back(values, scales)
    _assert_close(y, reference.forward(read_back, weight), weight_dtype)
    dx, dweight = pullback(dy)
    want_dx, want_dweight = reference.vjp(read_back, weight, dy)
    _assert_close(dx, want_dx, x_dtype)
    _assert_close(dweight, want_dweight, weight_dtype)
    if x_dtype == jnp.float32:  # the gradient at x itself is another one
        at_x, _ = reference.vjp(x, weight, dy)
        assert np.max(np.abs(at_x - want_dx)) > 100 * TOLERANCE[jnp.dtype(x_dtype)]


def test_an_empty_batch_has_a_zero_weight_gradient(implementation):
    x = jnp.zeros((0, 3, 256), jnp.bfloat16)
    weight = jnp.full(256, 2.0, jnp.float32)
    y, pullback = jax.vjp(gpu_ops.rms_norm_through_fp8_input, x, weight)
    assert y.shape == x.shape and y.dtype == weight.dtype
    dx, dweight = pullback(jnp.zeros_like(y))
    assert dx.shape == x.shape and dx.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(dweight), np.zeros(256, np.float32))


def test_the_read_back_has_no_gradient(implementation):
    _, values, scales, weight, _ = _inputs((2, 128))
    with pytest.raises(TypeError, match="rms_norm_through_fp8_input"):
        jax.grad(lambda w: jnp.sum(gpu_ops.rms_norm_from_fp8(values, scales, w)))(weight)


def test_a_second_derivative_is_a_clear_error_or_the_jnp_routes(implementation):
    # The float8 input's primitives have no derivatives of their own (the
    # custom VJP is the only rule): JAX says which it lacks. The HiJAX and
    # Pallas routes' gradient is jnp's, which JAX differentiates again.
    x, _, _, weight, dy = _inputs((2, 128), seed=7)

    def grad_norm(x):
        dx = jax.grad(lambda x: jnp.sum(gpu_ops.rms_norm_through_fp8_input(x, weight) * dy))(x)
        return jnp.sum(dx * dx)

    if implementation == "ffi":
        with pytest.raises(NotImplementedError, match="Differentiation rule for .rms_norm_"):
            jax.grad(grad_norm)(x)
        return
    assert np.all(np.isfinite(jax.grad(grad_norm)(x)))


@pytest.mark.parametrize("in_axes", [(0, 0, None), (1, 1, None), (0, 0, 0)], ids=str)
def test_vmap_is_a_loop_over_examples(in_axes, implementation):
    _, values, scales, weight, _ = _inputs((3, 4, 256), seed=3)
    weights = jnp.stack([weight * (1 + k) for k in range(3)])
    moved = [a if in_axes[0] == 0 else jnp.moveaxis(a, 0, 1) for a in (values, scales)]
    got = jax.jit(jax.vmap(gpu_ops.rms_norm_from_fp8, in_axes=in_axes))(
        *moved, weight if in_axes[2] is None else weights)
    for k in range(3):
        want = gpu_ops.rms_norm_from_fp8(values[k], scales[k],
                                         weight if in_axes[2] is None else weights[k])
        np.testing.assert_allclose(got[k], want, rtol=1e-6, atol=1e-6)


def test_per_example_gradients_under_vmap(implementation):
    x, _, _, weight, dy = _inputs((3, 4, 256), seed=6)

    def loss(x, weight, dy):
        return jnp.sum(gpu_ops.rms_norm_through_fp8_input(x, weight) * dy)

    got = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1)), in_axes=(0, None, 0)))(x, weight, dy)
    for k in range(3):
        want = jax.grad(loss, argnums=(0, 1))(x[k], weight, dy[k])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g[k], w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit])
@pytest.mark.parametrize("spec", [P("data"), P(None, "data"), P(None, None, "data")], ids=str)
def test_sharded_rows_give_the_one_device_answer(spec, axis_type, implementation):
    devices = jax.devices() if len(jax.devices()) >= 2 else jax.devices("cpu")
    mesh = jax.sharding.Mesh(np.array(devices[:4]), ("data",), axis_types=(axis_type,))
    x, values, scales, weight, dy = _inputs((8, 4, 256), seed=4)
    placed = NamedSharding(mesh, spec)
    scales_placed = NamedSharding(mesh, P(*spec[:2], None))

    def loss(x, w):
        return jnp.sum(gpu_ops.rms_norm_through_fp8_input(x, w) * dy)

    with jax.set_mesh(mesh):
        args = (jax.device_put(values, placed), jax.device_put(scales, scales_placed), weight)
        y = jax.jit(gpu_ops.rms_norm_from_fp8)(*args)
        hlo = jax.jit(gpu_ops.rms_norm_from_fp8).lower(*args).compile().as_text()
        grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
        grads = grad(jax.device_put(x, placed), weight)
        grad_hlo = grad.lower(jax.device_put(x, placed), weight).compile().as_text()
    if spec[0] is not None or spec[1] is not None:  # rows split: none gathered
        for text in (hlo, grad_hlo):
            assert "all-gather" not in text and "all-to-all" not in text
    on_one = [jax.device_put(a, devices[0]) for a in (values, scales, weight, x)]
    np.testing.assert_allclose(y, gpu_ops.rms_norm_from_fp8(*on_one[:3]), rtol=1e-6, atol=1e-6)
    want_grads = jax.grad(loss, argnums=(0, 1))(on_one[3], on_one[2])
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_export_with_a_symbolic_batch(implementation):
    from jax import export

    (batch,) = export.symbolic_shape("b")
    checks = [export.DisabledSafetyCheck.custom_call(name)
              for name in ("gpu_ops_rms_norm_fwd", "gpu_ops_rms_norm_bwd",
                           ffi_targets.FROM_FP8_FORWARD_TARGET,
                           ffi_targets.FROM_FP8_BACKWARD_TARGET)]

    def value_and_grads(x, weight, dy):
        y, pullback = jax.vjp(gpu_ops.rms_norm_through_fp8_input, x, weight)
        return (y, *pullback(dy))

    export_it = export.export(jax.jit(value_and_grads), platforms=["cpu", "cuda"],
                              disabled_checks=checks)
    types = (jax.ShapeDtypeStruct((batch, 256), jnp.float32),
             jax.ShapeDtypeStruct((256,), jnp.float32),
             jax.ShapeDtypeStruct((batch, 256), jnp.float32))
    if implementation == "pallas":
        with pytest.raises(NotImplementedError, match="implementation='pallas'.*symbolic"):
            export_it(*types)
        return
    restored = export.deserialize(export_it(*types).serialize())
    x, _, _, weight, dy = _inputs((5, 256), seed=5)
    for got, want in zip(restored.call(x, weight, dy), value_and_grads(x, weight, dy)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.ffi_lowering
@pytest.mark.parametrize("platform", ["cpu", "cuda"])
def test_the_kernels_read_float8_forward_and_backward(platform, implementation):
    x, _, _, weight, _ = _inputs((4, 256), jnp.bfloat16)
    grad = jax.jit(jax.grad(lambda x: jnp.sum(gpu_ops.rms_norm_through_fp8_input(x, weight))))
    text = grad.trace(x).lower(lowering_platforms=(platform,)).as_text()
    calls = [line for line in text.splitlines() if "stablehlo.custom_call" in line]
    if implementation != "ffi":  # XLA dequantises; the norm's own calls
        assert not any("from_fp8" in call for call in calls)
        return
    forward, backward = calls
    assert "@gpu_ops_rms_norm_from_fp8_fwd(" in forward
    assert ("(tensor<4x256xf8E4M3FN>, tensor<256xbf16>, tensor<4x2xf32>) -> "
            "(tensor<4x256xbf16>, tensor<4xf32>)") in forward
    assert "@gpu_ops_rms_norm_from_fp8_bwd(" in backward
    assert ("(tensor<4x256xbf16>, tensor<4xf32>, tensor<4x256xf8E4M3FN>, tensor<256xbf16>, "
            "tensor<4x2xf32>) -> (tensor<4x256xbf16>, tensor<256xbf16>") in backward


F8 = jnp.zeros((4, 256), jnp.float8_e4m3fn)
SCALES = jnp.ones((4, 2), jnp.float32)
W256 = jnp.ones(256, jnp.float32)


@pytest.mark.parametrize("values,scales,weight,error,message", [
    (F8.astype(jnp.bfloat16), SCALES, W256, TypeError, "values must be float8_e4m3fn"),
    (F8, SCALES.astype(jnp.float16), W256, TypeError, "scales must be float32"),
    (F8, SCALES, W256.astype(jnp.float64), TypeError, "weight must be float16, bfloat16 or"),
    (F8, SCALES[:, :1], W256, ValueError, r"scales must have shape \(4, 2\)"),
    (F8, SCALES, W256[:128], ValueError, "values' last axis must be"),
    (F8[:, :200], SCALES, W256[:200], ValueError, "a multiple of 128"),
], ids=["values", "scales dtype", "weight dtype", "scales shape", "weight length", "groups"])
def test_bad_float8_input_is_a_clear_error(values, scales, weight, error, message,
                                           implementation):
    with pytest.raises(error, match=f"rms_norm_from_fp8: .*{message}"):
        gpu_ops.rms_norm_from_fp8(values, scales, weight)


@pytest.mark.parametrize("weight,error,message", [
    (jnp.ones(256, jnp.float64), TypeError, "weight must be float16, bfloat16 or float32"),
    (jnp.ones(200, jnp.float32), ValueError, "a multiple of 128"),
], ids=["dtype", "groups"])
def test_bad_weight_through_float8_is_a_clear_error(weight, error, message, implementation):
    with pytest.raises(error, match=f"rms_norm_through_fp8_input: .*{message}"):
        gpu_ops.rms_norm_through_fp8_input(jnp.ones((4, weight.shape[0])), weight)


def _spec(shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype)


@pytest.mark.parametrize("operands,message", [
    ((F8.astype(jnp.bfloat16), W256, SCALES), "values must be float8_e4m3fn"),
    ((F8, W256, SCALES[:, :1]), "scales has shape"),
    ((F8, W256.astype(jnp.float64), SCALES), "weight must be float16, bfloat16 or float32"),
], ids=["values", "scales", "weight"])
def test_the_forward_handler_rejects_mismatched_buffers(operands, message):
    call = jax.ffi.ffi_call(ffi_targets.FROM_FP8_FORWARD_TARGET,
                            [_spec((4, 256), jnp.float32), _spec((4,), jnp.float32)])
    with pytest.raises(Exception, match=f"gpu_ops rms_norm: {message}"):
        jax.block_until_ready(call(*operands, eps=np.float64(1e-5)))


@pytest.mark.parametrize("bad", ["dy dtype", "dx dtype", "inv_rms shape"])
def test_the_backward_handler_rejects_mismatched_buffers(bad):
    dy = jnp.ones((4, 256), jnp.bfloat16 if bad == "dy dtype" else jnp.float32)
    inv = jnp.ones(3 if bad == "inv_rms shape" else 4, jnp.float32)
    results = [_spec((4, 256), jnp.float16 if bad == "dx dtype" else jnp.float32),
               _spec((256,), jnp.float32)]
    if jax.default_backend() == "gpu":
        results += [_spec(shape, dtype) for shape, dtype in
                    ffi_targets.cuda_from_fp8_backward_scratch((4, 256), (256,))]
    call = jax.ffi.ffi_call(ffi_targets.FROM_FP8_BACKWARD_TARGET, results)
    with pytest.raises(Exception, match=f"gpu_ops rms_norm: {bad.split()[0]}"):
        jax.block_until_ready(call(dy, inv, F8, W256, SCALES, eps=np.float64(1e-5)))
