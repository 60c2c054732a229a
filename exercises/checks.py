"""Checks of the exercise track's steps, each against jax.nn.softmax.

`check(step)` loads your `exercises/softmax/softmax.py` afresh (it compiles
your C++ and CUDA files again where they changed), runs the step's checks
and says what it found: correct, not written yet, or what is wrong.
`check(step, solution=True)` checks the book's solution instead.
`python -m exercises.checks [--solution]` checks every step.
"""

import importlib.util
import itertools
import re
import sys
import textwrap
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import dispatch
from jax.extend.core import Primitive
from jax.interpreters import mlir
from jax.sharding import NamedSharding, PartitionSpec as P

HERE = Path(__file__).resolve().parent
YOURS = HERE / "softmax" / "softmax.py"
SOLUTION = HERE / "solutions" / "softmax" / "softmax.py"
STEPS = {1: "the handlers and their registration", 2: "the implementation",
         3: "the lowering", 4: "abstract evaluation", 5: "the JVP", 6: "the vmap rule",
         7: "the sharding rule"}
_loads = itertools.count()


class Wrong(Exception):
    """What a check found wrong, in words."""


def load(path):
    """The module at `path`, executed afresh."""
    spec = importlib.util.spec_from_file_location(f"softmax_exercise_{next(_loads)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def inputs():
    """Rows of several lengths and scales, large values included (exp(1000)
    overflows float32: a softmax must subtract the row's largest value)."""
    keys = jax.random.split(jax.random.key(0), 3)
    return {"(5, 7)": jax.random.normal(keys[0], (5, 7), jnp.float32),
            "(2, 3, 300) times 10": 10 * jax.random.normal(keys[1], (2, 3, 300), jnp.float32),
            "(3, 1)": jax.random.normal(keys[2], (3, 1), jnp.float32),
            "(2, 4) near 1000": jnp.array([[1000.0, 1001, 999, 1000], [-3, 0, 2, 1]], jnp.float32),
            "(0, 4)": jnp.zeros((0, 4), jnp.float32)}


def compare(name, got, expected, what):
    got = np.asarray(got)
    if got.shape != np.shape(expected):
        raise Wrong(f"{what} of x {name}: shape {got.shape}, expected {np.shape(expected)}")
    if not np.allclose(got, expected, rtol=1e-5, atol=1e-6):
        where = np.unravel_index(np.argmax(np.abs(got - expected)), got.shape)
        raise Wrong(f"{what} of x {name}: at {tuple(int(i) for i in where)} got "
                    f"{got[where]:.6g}, expected {expected[where]:.6g}")


def values(function, what):
    for name, x in inputs().items():
        compare(name, function(x), reference(x), what)


def handler_error(error):
    """The handler's own message from an XLA error."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    return next((line for line in lines if "softmax" in line or "TODO" in line), lines[0])


def devices_of(module):
    """The devices the checks run your op on: the default backend's, or the
    CPUs where your library has no handler for it (a GPU machine without
    nvcc builds the C++ handlers only)."""
    library = getattr(module, "library", None)
    if jax.default_backend() != "cpu" and getattr(library, "cuda", None) is None:
        return jax.devices("cpu")
    return jax.devices()


def cause(error):
    """What went wrong, from an error's message: its last line of the form
    "SomeError: what", or else its last line. Where JAX wraps an error your
    code raised (a partition function's, in a JaxRuntimeError that carries
    its traceback and then where in your code it was called), that line is
    the error your code raised."""
    lines = [line.rstrip() for line in str(error).splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"[A-Za-z_][\w.]*(Error|Exception)\b", line)]
    return (raised or lines or [type(error).__name__])[-1]


def check_handlers(module):
    def call(x):
        return jax.ffi.ffi_call(module.library.name, jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    # the default device's handler, and on a GPU machine the CPU one too
    devices = list(dict.fromkeys([devices_of(module)[0], jax.devices("cpu")[0]]))
    for device in devices:
        try:
            with jax.default_device(device):
                values(call, f"the {device.platform.upper()} handler's softmax")
        except jax.errors.JaxRuntimeError as error:
            if "No FFI handler registered" in str(error):
                raise NotImplementedError("register() registers no handler") from None
            if "TODO" in str(error):
                raise NotImplementedError("the handler returns its TODO error") from None
            raise Wrong(f"the handler returned an error: {handler_error(error)}") from None
    # A CUDA handler that only compiled is not checked: say which it was.
    if module.library.cuda is None:
        cuda = "not built: no nvcc"
    elif any(device.platform == "gpu" for device in devices):
        cuda = "ran on the GPU"
    else:
        cuda = "compiled, not run: no GPU here"
    return f"the handlers give softmax for 5 shapes, large values included (CUDA handler: {cuda})"


def check_implementation(module):
    values(module.softmax_p.bind, "softmax_p.bind (eagerly)")
    return "softmax_p.bind(x) gives softmax, eagerly"


def check_lowering(module):
    probe = Primitive("softmax_lowering_check")  # your lowering, nothing else of yours
    probe.def_impl(partial(dispatch.apply_primitive, probe))
    probe.def_abstract_eval(lambda x: x)
    mlir.register_lowering(probe, module.softmax_lowering)
    x = inputs()["(5, 7)"]
    text = jax.jit(probe.bind).lower(x).as_text()
    if f'"{module.library.name}"' not in text and f"@{module.library.name}" not in text:
        raise Wrong(f"the lowering does not call the handler {module.library.name}")
    values(jax.jit(probe.bind), "jit of softmax_p with your lowering")
    return "jit compiles softmax_p to a call of the handler, which gives softmax"


def check_abstract_eval(module):
    for dtype, error in ((jnp.int32, TypeError), (jnp.bfloat16, TypeError)):
        try:
            jax.eval_shape(module.softmax_p.bind, jax.ShapeDtypeStruct((2, 3), dtype))
        except error:
            continue
        except NotImplementedError:
            raise
        except Exception as other:
            raise Wrong(f"x of {jnp.dtype(dtype).name} raised {type(other).__name__}, "
                        f"expected {error.__name__}") from None
        raise Wrong(f"x of {jnp.dtype(dtype).name} was accepted: the handler takes float32 only")
    try:
        jax.eval_shape(module.softmax_p.bind, jax.ShapeDtypeStruct((), jnp.float32))
        raise Wrong("a scalar x was accepted: softmax needs an axis")
    except ValueError:
        pass
    shape = jax.eval_shape(module.softmax_p.bind, jax.ShapeDtypeStruct((4, 2, 9), jnp.float32))
    if (shape.shape, shape.dtype) != ((4, 2, 9), jnp.float32):
        raise Wrong(f"x (4, 2, 9) float32 gave {shape.shape} {shape.dtype}")
    values(jax.jit(module.softmax), "jit(softmax)")
    return "shapes and dtypes right, TypeError and ValueError for bad x, jit gives softmax"


def check_jvp(module):
    def loss(softmax, x):
        weights = jnp.cos(jnp.arange(x.size, dtype=x.dtype).reshape(x.shape))
        return jnp.sum(softmax(x) * weights)

    for name, x in inputs().items():
        dx = jnp.sin(jnp.arange(x.size, dtype=x.dtype).reshape(x.shape))
        expected = jax.jvp(jax.nn.softmax, (x,), (dx,))[1]
        compare(name, jax.jvp(module.softmax, (x,), (dx,))[1], expected, "jvp")
        expected = jax.grad(partial(loss, jax.nn.softmax))(x)
        compare(name, jax.grad(partial(loss, module.softmax))(x), expected, "grad")
        compare(name, jax.jit(jax.grad(partial(loss, module.softmax)))(x), expected, "jit(grad)")
    return "jvp, grad and jit(grad) match jax.nn.softmax's"


def check_vmap(module):
    x = inputs()["(2, 3, 300) times 10"]
    for axis in (0, 1, 2):
        compare(f"(2, 3, 300), in_axes={axis}", jax.vmap(module.softmax, in_axes=axis)(x),
                reference(np.moveaxis(np.asarray(x), axis, 0)), "vmap(softmax)")
    compare("(2, 3, 300), two vmaps", jax.vmap(jax.vmap(module.softmax))(x), reference(x),
            "vmap(vmap(softmax))")
    grads = jax.vmap(jax.grad(lambda row: module.softmax(row)[0, 0]), in_axes=1)(x)
    expected = jax.vmap(jax.grad(lambda row: jax.nn.softmax(row)[0, 0]), in_axes=1)(x)
    compare("(2, 3, 300), in_axes=1", grads, expected, "vmap of grad")
    return "vmap over every axis, nested, and of grad matches"


def check_sharding(module):
    # the GPUs where there are several, else the CPU devices (8 in the chapters)
    devices = devices_of(module)
    devices = devices if len(devices) > 1 else jax.devices("cpu")
    mesh = jax.make_mesh((len(devices),), ("d",), devices=devices)
    if len(devices) == 1:
        raise Wrong("one device only: set XLA_FLAGS=--xla_force_host_platform_device_count=8")
    x = jax.random.normal(jax.random.key(1), (2 * len(devices), 3, 8 * len(devices)),
                          jnp.float32)
    forward = jax.jit(module.softmax)
    for spec in (P("d"), P(None, None, "d"), P()):
        sharded = jax.device_put(x, NamedSharding(mesh, spec))
        try:
            compare(f"{x.shape} sharded as {spec}", forward(sharded), reference(x), "softmax")
        except NotImplementedError:
            raise
        except Wrong:
            raise
        except Exception as error:
            last = cause(error)
            if last.startswith("NotImplementedError"):  # raised in your partition function
                raise NotImplementedError(last.partition(": ")[2]) from None
            raise Wrong(f"x sharded as {spec}: {type(error).__name__}, caused by {last}") from None
    rows = jax.device_put(x, NamedSharding(mesh, P("d")))
    compiled = forward.lower(rows).compile().as_text()
    if "all-gather" in compiled or "all-to-all" in compiled:
        raise Wrong("x sharded by rows was gathered: each device can take its own rows")
    if forward(rows).sharding.spec[:1] != P("d")[:1]:
        raise Wrong(f"x sharded by rows gave a result sharded as {forward(rows).sharding.spec}")
    grad = jax.jit(jax.grad(lambda x: jnp.sum(module.softmax(x) ** 2)))
    expected = jax.grad(lambda x: jnp.sum(jax.nn.softmax(x) ** 2))(x)
    compare(f"{x.shape} sharded by rows", grad(rows), expected, "grad")
    in_shards = jax.shard_map(module.softmax, mesh=mesh, in_specs=P("d"), out_specs=P("d"))
    compare(f"{x.shape} in shard_map", jax.jit(in_shards)(rows), reference(x), "softmax")
    return ("right with rows or the last axis split over the devices, rows stay split "
            "without a gather, grad and shard_map right")


CHECKS = {1: check_handlers, 2: check_implementation, 3: check_lowering,
          4: check_abstract_eval, 5: check_jvp, 6: check_vmap, 7: check_sharding}


def verdict(step, module):
    """(status, words): status is 'correct', 'not written yet' or 'wrong'."""
    try:
        with jax.default_device(devices_of(module)[0]):
            return "correct", CHECKS[step](module)
    except NotImplementedError as error:
        return "not written yet", str(error) or f"step {step}"
    except Wrong as error:
        return "wrong", str(error)
    except Exception as error:  # what your code raised
        last = cause(error)
        return "wrong", last if last.startswith(type(error).__name__) else (
            f"{type(error).__name__}: {last}")


class Verdict:
    """What a check found: `status` is 'correct', 'not written yet' or 'wrong'."""

    def __init__(self, step, whose, status, words):
        self.step, self.whose, self.status, self.words = step, whose, status, words

    @property
    def correct(self):
        return self.status == "correct"

    def __repr__(self):
        found = textwrap.fill(f"{self.status}: {self.words}", 88, initial_indent="  ",
                              subsequent_indent="    ", break_long_words=False)
        return f"Step {self.step}, {STEPS[self.step]}, of {self.whose}:\n{found}"


def check(step, solution=False):
    """The verdict on `step` of your softmax (or of the solution)."""
    path = SOLUTION if solution else YOURS
    try:
        module = load(path)
    except NotImplementedError as error:
        status, words = "not written yet", str(error)
    except RuntimeError as error:  # a compiler's message
        status, words = "wrong", str(error)
    else:
        status, words = verdict(step, module)
    return Verdict(step, "the solution" if solution else "your softmax", status, words)


if __name__ == "__main__":
    solution = "--solution" in sys.argv[1:]
    verdicts = [check(step, solution) for step in STEPS]
    print(*verdicts, sep="\n")
    sys.exit(0 if all(v.correct for v in verdicts) else 1)
