"""Bad input gets a clear Python exception, from Python and from the handlers."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gpu_ops
from gpu_ops import ffi_targets

X = jnp.ones((4, 8), jnp.float32)
W = jnp.ones(8, jnp.float32)


@pytest.mark.parametrize("bad", ["x", "weight"])
@pytest.mark.parametrize("dtype", [jnp.int32, jnp.bool_, jnp.complex64, jnp.float8_e4m3fn])
def test_non_float_dtypes(bad, dtype):
    x = X.astype(dtype) if bad == "x" else X
    weight = W.astype(dtype) if bad == "weight" else W
    with pytest.raises(TypeError, match=f"rms_norm: {bad} must be float16"):
        gpu_ops.rms_norm(x, weight)


@pytest.mark.parametrize("x_shape,w_shape,message", [
    ((4, 8), (7,), "trailing shape"),
    ((4, 8), (4,), "trailing shape"),
    ((4, 8), (), "at least one dimension"),
    ((4, 0), (0,), "must not be empty"),
    ((8,), (1, 8), "more dimensions"),
])
def test_bad_shapes(x_shape, w_shape, message):
    with pytest.raises(ValueError, match=message):
        gpu_ops.rms_norm(jnp.ones(x_shape), jnp.ones(w_shape))


@pytest.mark.parametrize("eps", [float("nan"), float("inf"), -1e-5, 10**400])
def test_bad_eps_values(eps):
    # 10**400 raised OverflowError from float() before.
    with pytest.raises(ValueError, match="rms_norm: eps must be a finite number"):
        gpu_ops.rms_norm(X, W, eps)


@pytest.mark.parametrize("eps", ["1e-5", None, True, [1e-5]])
def test_bad_eps_types(eps):
    # A string raised ValueError before.
    with pytest.raises(TypeError, match="rms_norm: eps must be a Python or NumPy real number"):
        gpu_ops.rms_norm(X, W, eps)


def test_traced_eps_is_refused():
    with pytest.raises(TypeError, match="rms_norm: eps must be"):
        jax.jit(gpu_ops.rms_norm)(X, W, 1e-5)


def test_numpy_eps_is_accepted():
    gpu_ops.rms_norm(X, W, np.float32(1e-3))


def _spec(shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype)


def _with_cuda_scratch(results, scratch):
    """The results plus, on a GPU, the CUDA handler's scratch results."""
    if jax.default_backend() == "gpu":
        results = [*results, *(_spec(shape, dtype) for shape, dtype in scratch)]
    return results


def _forward_call(results, x, w, eps=np.float64(1e-5)):
    return jax.ffi.ffi_call(ffi_targets.FORWARD_TARGET, results)(x, w, eps=eps, residual=False)


def _backward_results(x_shape, x_dtype, w_shape, w_dtype):
    return _with_cuda_scratch([_spec(x_shape, x_dtype), _spec(w_shape, w_dtype)],
                              ffi_targets.cuda_backward_scratch(x_shape, x_dtype, w_shape))


@pytest.mark.parametrize("results,args,message", [
    ([_spec((4, 8), jnp.float32), _spec((5,), jnp.float32)], (X, W), "inv_rms has shape"),
    ([_spec((4, 8), jnp.float16), _spec((4,), jnp.float32)], (X, W), "y has dtype"),
    ([_spec((4, 8), jnp.float32), _spec((4,), jnp.float32)], (X, jnp.ones(4)), "trailing shape"),
    ([_spec((4, 8), jnp.float32), _spec((4,), jnp.float32)], (X.astype(jnp.int32), W), "x must be"),
    ([_spec((4, 8), jnp.float32), _spec((4,), jnp.float64)], (X, W), "inv_rms has dtype"),
])
def test_forward_handler_rejects_mismatched_buffers(results, args, message):
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(_forward_call(results, *args))


def test_forward_handler_rejects_non_finite_eps():
    results = [_spec((4, 8), jnp.float32), _spec((4,), jnp.float32)]
    with pytest.raises(Exception, match="eps must be a finite number"):
        jax.block_until_ready(_forward_call(results, X, W, eps=np.float64(np.nan)))


def test_forward_handler_rejects_eps_of_the_wrong_type():
    results = [_spec((4, 8), jnp.float32), _spec((4,), jnp.float32)]
    with pytest.raises(Exception, match="expected F64 but got F32"):
        jax.block_until_ready(_forward_call(results, X, W, eps=np.float32(1e-5)))


@pytest.mark.parametrize("added,sum_spec,message", [
    (X[:, :4], _spec((4, 8), jnp.float32), "residual has shape"),
    (X.astype(jnp.float16), _spec((4, 8), jnp.float32), "residual has dtype"),
    (X, _spec((4, 8), jnp.float16), r"x \+ residual has dtype"),
])
def test_residual_forward_handler_rejects_mismatched_buffers(added, sum_spec, message):
    results = [_spec((4, 8), jnp.float32), _spec((4,), jnp.float32), sum_spec]
    call = jax.ffi.ffi_call(ffi_targets.FORWARD_TARGET, results)
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(call(X, W, added, eps=np.float64(1e-5), residual=True))


FORWARD_RESULTS = [_spec((4, 8), jnp.float32), _spec((4,), jnp.float32)]


# A variant's attribute and its buffers must agree: the handler takes the
# buffers after the target's own only where the attributes name them.
@pytest.mark.parametrize("residual,operands,results,message", [
    (True, (X, W), FORWARD_RESULTS, r"residual=true\) take 1 more operand.*got 0 and 0"),
    (True, (X, W, X), FORWARD_RESULTS, r"take 1 more operand\(s\) and 1 more result.*got 1 and 0"),
    (False, (X, W, X), [*FORWARD_RESULTS, _spec((4, 8), jnp.float32)],
     r"residual=false\) take 0 more operand.*got 1 and 1"),
], ids=["no residual", "no sum", "a residual unasked"])
def test_forward_handler_checks_the_buffers_against_the_variant(residual, operands, results,
                                                                 message):
    call = jax.ffi.ffi_call(ffi_targets.FORWARD_TARGET, results)
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(call(*operands, eps=np.float64(1e-5), residual=residual))


def test_forward_handler_needs_its_variant_attribute_of_its_type():
    # (Not np.int32(1): JAX caches an eager call by its attributes, and
    # np.int32(1) == True, so that call could run another test's executable.)
    call = jax.ffi.ffi_call(ffi_targets.FORWARD_TARGET, FORWARD_RESULTS)
    with pytest.raises(Exception, match="Wrong scalar data type: expected PRED but got S32"):
        jax.block_until_ready(call(X, W, eps=np.float64(1e-5), residual=np.int32(2)))


# A call with fewer or more attributes than the handler binds: on the CPU,
# XLA's FFI refuses it before the handler runs. On a GPU, jaxlib 0.11.2's
# runtime crashes the process instead (for every target, eps alone too), so
# there the call runs in a process of its own, which must die of it: the
# day it does not, chapter 13's warning and this test change.
MISSING_ATTRIBUTE = """
import jax, jax.numpy as jnp, numpy as np
from gpu_ops import ffi_targets
results = [jax.ShapeDtypeStruct((4, 8), jnp.float32), jax.ShapeDtypeStruct((4,), jnp.float32)]
call = jax.ffi.ffi_call(ffi_targets.FORWARD_TARGET, results)
jax.block_until_ready(call(jnp.ones((4, 8)), jnp.ones(8), eps=np.float64(1e-5)))
"""


def test_a_call_missing_an_attribute_is_refused_or_crashes():
    if jax.default_backend() == "cpu":
        with pytest.raises(Exception, match="Wrong number of attributes: expected 2 but got 1"):
            exec(MISSING_ATTRIBUTE, {})
        return
    ran = subprocess.run([sys.executable, "-c", MISSING_ATTRIBUTE], capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode < 0, (ran.returncode, ran.stderr[-2000:])


X128, W128 = jnp.ones((4, 128), jnp.float32), jnp.ones(128, jnp.float32)


@pytest.mark.parametrize("results,args,message", [
    ([_spec((4, 128), jnp.bfloat16), _spec((4,), jnp.float32), _spec((4, 1), jnp.float32)],
     (X128, W128), "values has dtype bfloat16, expected float8_e4m3fn"),
    ([_spec((4, 128), jnp.float8_e4m3fn), _spec((4,), jnp.float32), _spec((4, 2), jnp.float32)],
     (X128, W128), "scales has shape"),
    ([_spec((4, 8), jnp.float8_e4m3fn), _spec((4,), jnp.float32), _spec((4, 1), jnp.float32)],
     (X, W), "multiple of 128"),
])
def test_quantised_forward_handler_rejects_mismatched_buffers(results, args, message):
    call = jax.ffi.ffi_call(ffi_targets.FP8_FORWARD_TARGET, results)
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(call(*args, eps=np.float64(1e-5), residual=False, scaled=False))


def test_residual_quantised_forward_handler_checks_the_sum():
    results = [_spec((4, 128), jnp.float8_e4m3fn), _spec((4,), jnp.float32),
               _spec((4, 1), jnp.float32), _spec((4, 128), jnp.bfloat16)]
    call = jax.ffi.ffi_call(ffi_targets.FP8_FORWARD_TARGET, results)
    with pytest.raises(Exception, match=r"x \+ residual has dtype bfloat16"):
        jax.block_until_ready(call(X128, W128, X128, eps=np.float64(1e-5), residual=True,
                                   scaled=False))


QUANTISED_RESULTS = [_spec((4, 128), jnp.float8_e4m3fn), _spec((4,), jnp.float32),
                     _spec((4, 1), jnp.float32)]


@pytest.mark.parametrize("row_scales,message", [
    (jnp.ones(3, jnp.float32), "row_scales has shape"),
    (jnp.ones(4, jnp.bfloat16), "row_scales has dtype bfloat16"),
], ids=["shape", "dtype"])
@pytest.mark.parametrize("residual", [False, True], ids=["alone", "with a residual"])
def test_scaled_quantised_forward_handlers_check_the_row_scales(row_scales, message, residual):
    results = [*QUANTISED_RESULTS, *([_spec((4, 128), jnp.float32)] if residual else [])]
    call = jax.ffi.ffi_call(ffi_targets.FP8_FORWARD_TARGET, results)
    operands = (X128, W128, *((X128,) if residual else ()), row_scales)
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(call(*operands, eps=np.float64(1e-5), residual=residual,
                                   scaled=True))


def test_scaled_quantised_forward_handler_needs_the_row_scales():
    call = jax.ffi.ffi_call(ffi_targets.FP8_FORWARD_TARGET, QUANTISED_RESULTS)
    with pytest.raises(Exception, match=r"residual=false, scaled=true\) take 1 more operand"):
        jax.block_until_ready(call(X128, W128, eps=np.float64(1e-5), residual=False,
                                   scaled=True))


@pytest.mark.parametrize("bad", ["dy_dtype", "inv_shape", "dweight_shape"])
def test_backward_handler_rejects_mismatched_buffers(bad):
    dy = X.astype(jnp.float16) if bad == "dy_dtype" else X
    inv = jnp.ones(3 if bad == "inv_shape" else 4, jnp.float32)
    w_shape = (9,) if bad == "dweight_shape" else (8,)
    results = _backward_results((4, 8), jnp.float32, w_shape, jnp.float32)
    call = jax.ffi.ffi_call(ffi_targets.BACKWARD_TARGET, results)
    with pytest.raises(Exception, match="gpu_ops rms_norm"):
        jax.block_until_ready(call(dy, inv, X, W, eps=np.float64(1e-5)))


@pytest.mark.gpu
@pytest.mark.parametrize("scratch,message", [
    ([((4, 9), jnp.float32)], "dweight_partials must be"),
    ([((4, 8), jnp.float16)], "dweight_partials must be"),
    ([((8,), jnp.float32)], "dweight_partials must be"),
])
def test_cuda_backward_handler_checks_its_scratch(scratch, message):
    results = [_spec((4, 8), jnp.float32), _spec((8,), jnp.float32),
               *(_spec(shape, dtype) for shape, dtype in scratch)]
    call = jax.ffi.ffi_call(ffi_targets.BACKWARD_TARGET, results)
    inv = jnp.ones(4, jnp.float32)
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(call(X, inv, X, W, eps=np.float64(1e-5)))


# Each public function that normalises x, and its keywords besides eps and
# implementation.
NORMALISING_FUNCTIONS = {
    "rms_norm": (gpu_ops.rms_norm, ("residual",)),
    "rms_norm_fp8": (gpu_ops.rms_norm_fp8, ("residual", "scale")),
    "rms_norm_through_fp8": (gpu_ops.rms_norm_through_fp8, ("residual", "scale")),
    "rms_norm_through_fp8_input": (gpu_ops.rms_norm_through_fp8_input, ()),
}
BAD_ARGUMENTS = [  # (argument, value, error, message)
    ("x", X128.astype(jnp.int32), TypeError, "x must be float16"),
    ("weight", W128[:64], ValueError, "weight shape"),
    ("eps", -1.0, ValueError, "eps must be a finite number"),
    ("eps", "1e-5", TypeError, "eps must be a Python or NumPy real number"),
    ("implementation", "cuda", ValueError, "implementation must be one of"),
    ("implementation", 1, TypeError, "implementation must be a string"),
    ("residual", X128.astype(jnp.bfloat16), TypeError, "residual must have x's dtype"),
    ("residual", X128[:2], ValueError, "residual must have x's shape"),
    ("scale", -1.0, ValueError, "scale must be finite and positive"),
    ("scale", "1", TypeError, "scale must be a real number"),
]


@pytest.mark.parametrize("function,argument,value,error,message", [
    pytest.param(function, argument, value, error, message,
                 id=f"{function}-{argument}-{error.__name__}")
    for function, (_, keywords) in NORMALISING_FUNCTIONS.items()
    for argument, value, error, message in BAD_ARGUMENTS
    if argument in ("x", "weight", "eps", "implementation", *keywords)
])
def test_errors_name_the_function_called(function, argument, value, error, message):
    call = NORMALISING_FUNCTIONS[function][0]
    arguments = {"x": X128, "weight": W128, argument: value}
    with pytest.raises(error, match=f"^{function}: {message}"):
        call(**arguments)
