"""Time a transformer's training step with each RMS norm implementation.

    python benchmarks/training_step_bench.py [--out FILE] [--steps N] [--repeats N]
                                             [--layers N] [--d-model N] [--heads N]
                                             [--ffn N] [--vocab N] [--batch N] [--seq N]
                                             [--attention {xla,cudnn}]

The step (forward, backward and an SGD update) of the decoder in
llama_decoder.py, jitted with its parameters donated, runs with each way of
computing its norms:

- "jnp": the norms in jax.numpy, which XLA fuses with their neighbours;
- "gpu_ops": gpu_ops.rms_norm, a custom call XLA cannot fuse into anything,
  after the residual add;
- "gpu_ops_residual": gpu_ops.rms_norm with the residual add in its kernel;
- "gpu_ops_fp8": that norm's output quantised to float8 in the kernel, with
  one fixed scale (gpu_ops.rms_norm_through_fp8, read back in float32), and
  the matmuls that take it run in float8 (fp8_projection.py, each weight's
  scale from its largest magnitude at the end of the step before); the final
  norm, before the language-model head, stays "gpu_ops_residual"'s;
- "identity": no norms at all: each norm's input is only multiplied by its
  weight, held constant (no gradient, so the backward has no reduction
  either), which XLA fuses into the work around it. No norm can make the
  step faster than this, so the gap between "jnp" and "identity" bounds
  what any norm implementation can save. So that its matmuls run on data
  of the normed model's scale (without norms the activations grow until the
  loss is NaN), each of its norm weights starts as one over the root mean
  square that the norm's input has at the start, in the model with norms.

Attention is cuDNN's fused kernel on a GPU (``--attention``; XLA's on a
CPU), as in real training steps. Each variant is compiled (the number of
float8 matmuls in its compiled step is recorded) and warmed up; then
`repeats` rounds time `steps` steps of every variant in turn (one
synchronisation per variant and round), so that a drift of the GPU's clocks
falls on all variants alike. The median time per step over the rounds is
reported, with tokens per second. On a GPU, `steps` more steps of each
variant run under JAX's profiler, which gives per step: the GPU's kernel
time and the part of it in gpu_ops' kernels (the norms of the gpu_ops
variants; jax.numpy's norms are fused into XLA's kernels, where a profile
cannot tell them apart), the time in which the GPU ran a kernel, the time
from the profiled steps' first kernel to their last (so a step's time beyond
its kernels shows as the GPU waiting between kernels, or as time outside
them), the kernels that took the most time, and the profiled steps' own
time (which tells whether the profiler changes what it measures). The GPU's
clock and power during the timed rounds and during the profiled steps come
from nvidia-smi (gpu_state.py): at its power limit a GPU lowers its clock.
On a machine without a GPU a tiny model runs, to show the method.
"""

import argparse
import dataclasses
import datetime
import functools
import json
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp

import gpu_ops
from gpu_ops import float8

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import fp8_projection  # noqa: E402
import gpu_state  # noqa: E402
import kernel_profile  # noqa: E402
import llama_decoder  # noqa: E402
import rms_norm_bench  # noqa: E402

#: The float8 variant's scale for every norm output: magnitudes up to 8 are
#: represented, larger ones saturate. (Training recipes derive it from the
#: largest magnitudes of earlier steps; a fixed one costs the same.)
FP8_SCALE = 8 / float8.FLOAT8_MAX


def fp8_norm(x, weight, residual=None):
    """gpu_ops.rms_norm's signature, its output quantised to float8 and read
    back in float32, for fp8_projection.project."""
    options = {"scale": FP8_SCALE, "dtype": jnp.float32}
    if residual is None:
        return gpu_ops.rms_norm_through_fp8(x, weight, **options)[0]
    y, _, total = gpu_ops.rms_norm_through_fp8(x, weight, residual=residual, **options)
    return y, total


NORMS = {
    "jnp": llama_decoder.unfused(rms_norm_bench.xla_rms_norm),
    "gpu_ops": llama_decoder.unfused(gpu_ops.rms_norm),
    "gpu_ops_residual": gpu_ops.rms_norm,
    "gpu_ops_fp8": fp8_norm,
    "identity": llama_decoder.unfused(
        lambda x, weight: x * jax.lax.stop_gradient(weight).astype(x.dtype)),
}
#: The variants whose norm outputs go into float8 matmuls; the others' into h @ w.
PROJECTIONS = {"gpu_ops_fp8": fp8_projection.project}
#: Their final norm, before the language-model head (a bfloat16 matmul).
HEAD_NORMS = {"gpu_ops_fp8": gpu_ops.rms_norm}


def with_float8_scales(params):
    """params with each projected weight in the form fp8_projection.project
    takes, its scale from its matrix as it is now."""
    def scaled(weight):
        return fp8_projection.with_scale(weight["w"] if isinstance(weight, dict) else weight)
    layers = [{**layer, **{name: scaled(layer[name]) for name in llama_decoder.PROJECTED}}
              for layer in params["layers"]]
    return {**params, "layers": layers}


#: What a variant's parameters become after their initialisation and after
#: every update: the float8 variant's weight scales for the next step.
RESCALED = {"gpu_ops_fp8": with_float8_scales}
#: How many of the kernels that took the most time a profile records.
TOP_KERNELS = 8
#: Seconds the GPU rests before each variant's profiled steps. A GPU at its
#: power limit runs at a higher clock for a while after a pause; without the
#: same pause before each, the first variant's profile, which follows the
#: timed rounds directly, would run at a lower clock than the others'.
PROFILE_REST_S = 3.0
#: A model small enough for a CPU, to show the method.
CPU_CONFIG = llama_decoder.DecoderConfig(layers=2, d_model=128, heads=4, ffn=256, vocab=256,
                                         batch=2, seq=32, dtype="float32")


@functools.partial(jax.jit, static_argnums=2)
def norm_input_rms(params, tokens, config):
    """The root mean square of each norm's input in the model with
    jax.numpy's norms, in the order the model calls them."""
    found = []

    def recording(x, weight):
        found.append(jnp.sqrt(jnp.mean(jnp.square(x.astype(jnp.float32)))))
        return rms_norm_bench.xla_rms_norm(x, weight)

    llama_decoder.loss(params, tokens, llama_decoder.unfused(recording), config)
    return found


def initial_params(name, config, tokens):
    """Every variant's parameters, the same: the float8 variant's projected
    weights carry their scales (RESCALED), and the identity's norm weights
    scale each norm's input as the norm would at the start (the module's
    docstring says why)."""
    params = llama_decoder.init_params(config, jax.random.key(0))
    if name in RESCALED:
        return RESCALED[name](params)
    if name != "identity":
        return params
    rms = iter(norm_input_rms(params, tokens, config))

    def scale(weight):
        return (weight / next(rms)).astype(weight.dtype)

    layers = [{**layer, "attn_norm": scale(layer["attn_norm"]),
               "mlp_norm": scale(layer["mlp_norm"])} for layer in params["layers"]]
    return {**params, "layers": layers, "final_norm": scale(params["final_norm"])}


def step_function(name, config):
    norm, project = NORMS[name], PROJECTIONS.get(name, jnp.matmul)
    rescaled = RESCALED.get(name, lambda params: params)

    def step(params, tokens):
        params, loss = llama_decoder.train_step(params, tokens, norm, config, project,
                                                HEAD_NORMS.get(name))
        return rescaled(params), loss
    return jax.jit(step, donate_argnums=0)


def compiled_step(name, config, params, tokens):
    """The variant's step compiled for params and tokens, and the number of
    float8 matmuls in it."""
    compiled = step_function(name, config).lower(params, tokens).compile()
    return compiled, len(fp8_projection.FP8_MATMUL.findall(compiled.as_text()))


def gpu_milliseconds(profile, steps):
    """kernel_profile.kernel_times of a profile of `steps` steps, in
    milliseconds per step: "kernel_ms", "gpu_ops_kernel_ms", "busy_ms",
    "span_ms", and the TOP_KERNELS kernels that took the most time, as
    [name, milliseconds per step] ("top_kernels")."""
    times = kernel_profile.kernel_times(profile, steps, TOP_KERNELS)
    top = [[name, ns / 1e6] for name, ns in times.pop("top_kernels")]
    return {**{f"{key}_ms": ns / 1e6 for key, ns in times.items()}, "top_kernels": top}


def profiled(state, tokens, steps):
    """Runs `steps` steps of a variant's state (as run() keeps it) under the
    profiler: gpu_milliseconds of their profile with their own time per step
    as run() times it ("profiled_ms"), and when they ran (perf_counter's
    start and end). On a GPU, first rests PROFILE_REST_S."""
    if jax.default_backend() == "gpu":
        time.sleep(PROFILE_REST_S)

    def steps_run():
        start = time.perf_counter()
        for _ in range(steps):
            state["params"], state["loss"] = state["step"](state["params"], tokens)
        jax.block_until_ready(state["loss"])
        return start, time.perf_counter()

    (start, end), profile = kernel_profile.traced(steps_run)
    wall_ms = (end - start) / steps * 1e3
    return {**gpu_milliseconds(profile, steps), "profiled_ms": wall_ms}, (start, end)


def run(config, steps, repeats, norms=tuple(NORMS), profile=False):
    """{norm: {"times": seconds per step of each round, "first_loss",
    "last_loss", "float8_matmuls": how many its compiled step has, "gpu":
    gpu_milliseconds of a profile or None, "gpu_state": gpu_state.summary of
    its timed rounds ("timed") and its profiled steps ("profiled"), each None
    without nvidia-smi}}; profile: also run `steps` steps of each variant
    under the profiler."""
    tokens = jax.random.randint(jax.random.key(1), (config.batch, config.seq), 0, config.vocab)
    state = {}
    for name in norms:
        params = initial_params(name, config, tokens)
        step, float8_matmuls = compiled_step(name, config, params, tokens)
        params, first_loss = step(params, tokens)  # warm up
        params, loss = jax.block_until_ready(step(params, tokens))
        state[name] = {"step": step, "params": params, "times": [], "intervals": [],
                       "first_loss": float(first_loss), "loss": loss,
                       "float8_matmuls": float8_matmuls}
    with gpu_state.Sampler() as sampler:
        for _ in range(repeats):
            for s in state.values():
                start = time.perf_counter()
                for _ in range(steps):
                    s["params"], s["loss"] = s["step"](s["params"], tokens)
                jax.block_until_ready(s["loss"])
                end = time.perf_counter()
                s["times"].append((end - start) / steps)
                s["intervals"].append((start, end))
        kernels = {name: profiled(s, tokens, steps) if profile else (None, None)
                   for name, s in state.items()}
    return {name: {"times": s["times"], "first_loss": s["first_loss"],
                   "last_loss": float(s["loss"]), "float8_matmuls": s["float8_matmuls"],
                   "gpu": kernels[name][0],
                   "gpu_state": {
                       "timed": gpu_state.summary(sampler.samples, s["intervals"]),
                       "profiled": kernels[name][1] and gpu_state.summary(
                           sampler.samples, [kernels[name][1]])}}
            for name, s in state.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path,
                        help="JSON file (default: results/benchmarks/training_step_<device>.json)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    on_gpu = jax.default_backend() == "gpu"
    defaults = llama_decoder.DecoderConfig() if on_gpu else CPU_CONFIG
    for field in ("layers", "d_model", "heads", "ffn", "vocab", "batch", "seq"):
        parser.add_argument("--" + field.replace("_", "-"), type=int,
                            default=getattr(defaults, field))
    parser.add_argument("--attention", choices=("xla", "cudnn"),
                        default="cudnn" if on_gpu else "xla")
    args = parser.parse_args(argv)
    if not on_gpu:
        print("No GPU: a tiny model on the CPU, to show the method (not the norms' effect).")
    config = llama_decoder.DecoderConfig(
        **{f: getattr(args, f) for f in ("layers", "d_model", "heads", "ffn", "vocab",
                                          "batch", "seq", "attention")},
        dtype=defaults.dtype)
    if config.d_model % config.heads or config.head_dim % 2:
        parser.error("--d-model must be a multiple of --heads, with an even head size")
    device = jax.devices()[0].device_kind
    out = args.out or (rms_norm_bench.RESULTS
                       / f"training_step_{rms_norm_bench.device_slug(device)}.json")
    tokens_per_step = config.batch * config.seq
    common = {"device": device, "jax_version": jax.__version__,
              "commit": rms_norm_bench.commit(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "config": dataclasses.asdict(config),
              "steps": args.steps, "repeats": args.repeats}
    records = []
    results = run(config, args.steps, args.repeats, profile=on_gpu)
    for name, result in results.items():
        seconds = statistics.median(result["times"])
        first_loss, last_loss = result["first_loss"], result["last_loss"]
        record = {**common, "norm": name, "median_ms": round(seconds * 1e3, 3),
                  "tokens_per_s": round(tokens_per_step / seconds),
                  "first_loss": first_loss, "last_loss": last_loss,
                  "float8_matmuls": result["float8_matmuls"]}
        line = (f"{name:16} {seconds * 1e3:9.3f} ms per step {tokens_per_step / seconds:9.0f} "
                f"tokens/s  loss {first_loss:.4f} -> {last_loss:.4f}  "
                f"float8 matmuls {result['float8_matmuls']}")
        if kernels := result["gpu"]:
            record |= {key: round(ms, 3) for key, ms in kernels.items() if key != "top_kernels"}
            record["top_kernels"] = [[kernel, round(ms, 3)]
                                     for kernel, ms in kernels["top_kernels"]]
            line += (f"  kernels {kernels['kernel_ms']:.2f} ms (gpu_ops' "
                     f"{kernels['gpu_ops_kernel_ms']:.2f}), GPU busy {kernels['busy_ms']:.2f} "
                     f"of {kernels['span_ms']:.2f} ms; profiled steps "
                     f"{kernels['profiled_ms']:.2f} ms")
        if states := {when: found for when, found in result["gpu_state"].items() if found}:
            record["gpu_state"] = states
            timed = states.get("timed")
            if timed:
                line += (f"; SM clock {timed['sm_clock_mhz']:.0f} of "
                         f"{timed['max_sm_clock_mhz']:.0f} MHz, {timed['power_w']:.0f} of "
                         f"{timed['power_limit_w']:.0f} W, at the power cap "
                         f"{timed['power_capped']:.0%} of the time")
        records.append(record)
        print(line)
    out.write_text(json.dumps(records, indent=1) + "\n")
    print(f"wrote {len(records)} records to {out}")


if __name__ == "__main__":
    sys.exit(main())
