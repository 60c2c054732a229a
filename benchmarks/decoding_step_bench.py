"""Time a transformer's decoding step with each RMS norm implementation.

    python benchmarks/decoding_step_bench.py [--out FILE] [--steps N] [--repeats N]
                                             [--batches N [N ...]] [--layers N]
                                             [--d-model N] [--heads N] [--ffn N]
                                             [--vocab N] [--cache N]

One decoding step of the decoder in llama_decoder.py, with a norm per head
of its queries and keys ("QK-norm", as recent models have), takes one token
per sequence of a batch, writes the token's keys and values into each
layer's KV cache of `cache` positions, attends over the cache up to the
token's position and returns the next token's logits. The step is one jit
with the cache donated, so that XLA writes the new keys and values where
the cache lies. Its norms (the blocks' two, the final one and the QK-norms)
are, by variant:

- "jnp": jax.numpy's, which XLA fuses with their neighbours;
- "gpu_ops": gpu_ops.rms_norm, after the residual add;
- "gpu_ops_residual": gpu_ops.rms_norm with the residual add in its kernel
  (the QK-norms have no residual).

For each batch size, every variant is compiled, run once and checked
against "jnp"'s logits; then `repeats` rounds time `steps` steps of every
variant in turn (one synchronisation per variant and round), so that a
drift of the GPU's clocks falls on all variants alike, and the median time
per step over the rounds is reported, with "jnp"'s median over the
variant's (below 1: the variant is slower). Every step decodes at the same
position, half way into the cache: the attention reads the whole cache
either way, so a step's work does not depend on it. On a machine without a
GPU a tiny model runs, to show the method.
"""

import argparse
import dataclasses
import datetime
import functools
import json
import math
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import gpu_ops

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import llama_decoder  # noqa: E402
import rms_norm_bench  # noqa: E402

#: Each variant's norm, `norm(x, weight, residual=None)`, gpu_ops.rms_norm's signature.
NORMS = {
    "jnp": llama_decoder.unfused(rms_norm_bench.xla_rms_norm),
    "gpu_ops": llama_decoder.unfused(gpu_ops.rms_norm),
    "gpu_ops_residual": gpu_ops.rms_norm,
}
#: The model the issue's measurement used on an H200 (bfloat16).
GPU_CONFIG = llama_decoder.DecoderConfig(layers=8, d_model=4096, heads=32, ffn=12288,
                                         vocab=32000, seq=2048)
GPU_BATCHES = (1, 8, 64)
CPU_CONFIG = llama_decoder.DecoderConfig(layers=2, d_model=64, heads=4, ffn=128, vocab=256,
                                         seq=32)
CPU_BATCHES = (1, 4)
#: How far a variant's logits may be from "jnp"'s, relative to their largest
#: magnitude: bfloat16 activations, normalised in another order.
LOGITS_TOLERANCE = 0.05


def init_params(config, key):
    """llama_decoder's parameters, with the QK-norms' weights (one per
    layer, over a head's values) added."""
    params = llama_decoder.init_params(config, key)
    dtype = jnp.dtype(config.dtype)
    for layer in params["layers"]:
        layer["q_norm"] = jnp.ones((config.head_dim,), dtype)
        layer["k_norm"] = jnp.ones((config.head_dim,), dtype)
    return params


def empty_cache(config):
    """Each layer's (keys, values), (batch, cache positions, heads, head_dim)."""
    shape = (config.batch, config.seq, config.heads, config.head_dim)
    return [(jnp.zeros(shape, config.dtype), jnp.zeros(shape, config.dtype))
            for _ in range(config.layers)]


def attend(q, keys, values, position):
    """q (batch, 1, heads, head_dim) over the cache's positions up to
    `position`, in float32."""
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, keys, preferred_element_type=jnp.float32)
    scores = scores / math.sqrt(q.shape[-1])
    visible = jnp.arange(keys.shape[1]) <= position
    weights = jax.nn.softmax(jnp.where(visible, scores, -jnp.inf), axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", weights.astype(values.dtype), values)


def decode_step(params, cache, tokens, position, norm, config):
    """(the next token's logits (batch, vocab) in float32, the cache with this
    step's keys and values at `position`) for `tokens` (batch,)."""
    batch = tokens.shape[0]
    heads = (batch, 1, config.heads, config.head_dim)
    x, update = params["embed"][tokens][:, None, :], None
    new_cache = []
    for layer, (keys, values) in zip(params["layers"], cache):
        h, x = llama_decoder.add_then_norm(norm, x, update, layer["attn_norm"])
        q = llama_decoder.rotary(norm((h @ layer["wq"]).reshape(heads), layer["q_norm"]),
                                 position)
        k = llama_decoder.rotary(norm((h @ layer["wk"]).reshape(heads), layer["k_norm"]),
                                 position)
        v = (h @ layer["wv"]).reshape(heads)
        keys = jax.lax.dynamic_update_slice_in_dim(keys, k, position, axis=1)
        values = jax.lax.dynamic_update_slice_in_dim(values, v, position, axis=1)
        new_cache.append((keys, values))
        attention = attend(q, keys, values, position).reshape(batch, 1, config.d_model)
        h, x = llama_decoder.add_then_norm(norm, x, attention @ layer["wo"], layer["mlp_norm"])
        update = (jax.nn.silu(h @ layer["w_gate"]) * (h @ layer["w_up"])) @ layer["w_down"]
    h, _ = llama_decoder.add_then_norm(norm, x, update, params["final_norm"])
    return (h[:, 0] @ params["lm_head"]).astype(jnp.float32), new_cache


def compiled_step(name, config):
    """The variant's decoding step, jitted with its cache donated."""
    step = functools.partial(decode_step, norm=NORMS[name], config=config)
    return jax.jit(step, donate_argnums=1)


def run(config, batches, steps, repeats, norms=tuple(NORMS)):
    """{batch: {variant: seconds per step of each round}}, each variant
    checked against the first's logits."""
    times = {}
    for batch in batches:
        at_batch = dataclasses.replace(config, batch=batch)
        params = init_params(at_batch, jax.random.key(0))
        tokens = jax.random.randint(jax.random.key(1), (batch,), 0, at_batch.vocab)
        position = jnp.int32(at_batch.seq // 2)
        state = {}
        for name in norms:
            step = compiled_step(name, at_batch)
            logits, cache = step(params, empty_cache(at_batch), tokens, position)
            state[name] = {"step": step, "cache": cache, "logits": logits, "times": []}
        reference = np.asarray(state[norms[0]]["logits"])
        for name, s in state.items():
            error = np.abs(np.asarray(s["logits"]) - reference).max() / np.abs(reference).max()
            if not error <= LOGITS_TOLERANCE:
                raise AssertionError(f"batch {batch}, {name}: logits {error:.3f} (relative) "
                                     f"from {norms[0]}'s")
        for _ in range(repeats):
            for s in state.values():
                start = time.perf_counter()
                for _ in range(steps):
                    s["logits"], s["cache"] = s["step"](params, s["cache"], tokens, position)
                jax.block_until_ready(s["logits"])
                s["times"].append((time.perf_counter() - start) / steps)
        times[batch] = {name: s["times"] for name, s in state.items()}
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path,
                        help="JSON file (default: results/benchmarks/decoding_step_<device>.json)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=15)
    on_gpu = jax.default_backend() == "gpu"
    defaults = GPU_CONFIG if on_gpu else CPU_CONFIG
    parser.add_argument("--batches", type=int, nargs="+",
                        default=list(GPU_BATCHES if on_gpu else CPU_BATCHES))
    for field in ("layers", "d_model", "heads", "ffn", "vocab"):
        parser.add_argument("--" + field.replace("_", "-"), type=int,
                            default=getattr(defaults, field))
    parser.add_argument("--cache", type=int, default=defaults.seq,
                        help="positions in each layer's KV cache")
    args = parser.parse_args(argv)
    if not on_gpu:
        print("No GPU: a tiny model on the CPU, to show the method (not the norms' effect).")
    config = dataclasses.replace(defaults, seq=args.cache, **{
        f: getattr(args, f) for f in ("layers", "d_model", "heads", "ffn", "vocab")})
    if config.d_model % config.heads or config.head_dim % 2 or config.seq < 2:
        parser.error("--d-model must be a multiple of --heads, with an even head size, "
                     "and --cache at least 2")
    device = jax.devices()[0].device_kind
    out = args.out or (rms_norm_bench.RESULTS
                       / f"decoding_step_{rms_norm_bench.device_slug(device)}.json")
    common = {"device": device, "jax_version": jax.__version__,
              "commit": rms_norm_bench.commit(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "config": {k: v for k, v in dataclasses.asdict(config).items()
                         if k not in ("batch", "attention")},
              "steps": args.steps, "repeats": args.repeats}
    records = []
    for batch, by_norm in run(config, args.batches, args.steps, args.repeats).items():
        jnp_seconds = statistics.median(by_norm["jnp"])
        for name, times in by_norm.items():
            seconds = statistics.median(times)
            records.append({**common, "batch": batch, "norm": name,
                            "median_us": round(seconds * 1e6, 1),
                            "jnp_over_this": round(jnp_seconds / seconds, 4)})
            print(f"batch {batch:3} {name:16} {seconds * 1e6:10.1f} us per step  "
                  f"jnp / this {jnp_seconds / seconds:.3f}")
    out.write_text(json.dumps(records, indent=1) + "\n")
    print(f"wrote {len(records)} records to {out}")


if __name__ == "__main__":
    sys.exit(main())
