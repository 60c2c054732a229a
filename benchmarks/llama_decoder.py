"""A small LLaMA-style decoder whose RMS norm is a parameter.

Pre-norm blocks of causal self-attention (rotary position embeddings) and a
SwiGLU MLP, a final norm and a language-model head, trained for next-token
prediction. Every norm of the model is `norm(x, weight)` or, where a
block's update joins the residual stream first, `norm(update, weight,
residual=x)`, which returns the normalised sum and the sum (the signature of
gpu_ops.rms_norm; :func:`unfused` gives it to any plain norm). The matmuls
that take a norm's output (the attention's query, key and value projections
and the MLP's two input projections, PROJECTED) are `project(h, w)`, `h @ w`
unless given (a float8 variant may keep its own form of those weights). So
the training step can be timed with different norm implementations, the add
fused into the norm or not, their output quantised for float8 matmuls or
not, and the rest of the model unchanged (training_step_bench.py). The
final norm, whose output goes into the language-model head, may be another
(`head_norm`): float8 recipes keep the head in bfloat16. Attention is
jax.nn.dot_product_attention with the config's implementation: "xla" (any
backend) or "cudnn" (NVIDIA GPUs: a fused, flash-attention kernel, which
real training steps use).
"""

import dataclasses
import math

import jax
import jax.numpy as jnp


#: A layer's weights that `project` multiplies a norm's output by.
PROJECTED = ("wq", "wk", "wv", "w_gate", "w_up")


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    layers: int = 4
    d_model: int = 2048
    heads: int = 16
    ffn: int = 5632
    vocab: int = 32000
    batch: int = 8
    seq: int = 2048
    dtype: str = "bfloat16"
    attention: str = "xla"

    @property
    def head_dim(self):
        return self.d_model // self.heads


def init_params(config, key):
    """Parameters in config.dtype: normal weights scaled by 1/sqrt(fan-in),
    norm weights of ones."""
    dtype = jnp.dtype(config.dtype)
    d, f = config.d_model, config.ffn

    def dense(key, fan_in, fan_out):
        return (jax.random.normal(key, (fan_in, fan_out), jnp.float32)
                / math.sqrt(fan_in)).astype(dtype)

    keys = iter(jax.random.split(key, 2 + 7 * config.layers))
    layers = [{"attn_norm": jnp.ones((d,), dtype),
               "wq": dense(next(keys), d, d), "wk": dense(next(keys), d, d),
               "wv": dense(next(keys), d, d), "wo": dense(next(keys), d, d),
               "mlp_norm": jnp.ones((d,), dtype),
               "w_gate": dense(next(keys), d, f), "w_up": dense(next(keys), d, f),
               "w_down": dense(next(keys), f, d)}
              for _ in range(config.layers)]
    return {"embed": (jax.random.normal(next(keys), (config.vocab, d), jnp.float32)
                      ).astype(dtype),
            "layers": layers,
            "final_norm": jnp.ones((d,), dtype),
            "lm_head": dense(next(keys), d, config.vocab)}


def rotary(x, start=0):
    """Rotary position embedding of x (batch, seq, heads, head_dim) whose
    first position is `start` (a decoding step's token is at its position in
    the cache)."""
    seq, half = x.shape[1], x.shape[-1] // 2
    frequencies = 10_000.0 ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = (start + jnp.arange(seq, dtype=jnp.float32))[:, None] * frequencies
    cos = jnp.cos(angles)[None, :, None, :]
    sin = jnp.sin(angles)[None, :, None, :]
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).astype(x.dtype)


def unfused(norm):
    """`norm(x, weight)` given the residual form too: x + residual, then the norm."""
    def with_residual(x, weight, residual=None):
        if residual is None:
            return norm(x, weight)
        total = x + residual
        return norm(total, weight), total
    return with_residual


def add_then_norm(norm, x, update, weight):
    """(the norm of x + update, x + update); of x alone where no update is pending."""
    if update is None:
        return norm(x, weight), x
    return norm(update, weight, residual=x)


def block(x, update, layer, norm, config, project=jnp.matmul):
    """The residual stream x with the last block's `update` still to be added
    (None before the first block): (the stream, this block's update)."""
    h, x = add_then_norm(norm, x, update, layer["attn_norm"])
    batch, seq, d = x.shape
    heads = (batch, seq, config.heads, config.head_dim)
    q = rotary(project(h, layer["wq"]).reshape(heads))
    k = rotary(project(h, layer["wk"]).reshape(heads))
    v = project(h, layer["wv"]).reshape(heads)
    attention = jax.nn.dot_product_attention(q, k, v, is_causal=True,
                                             implementation=config.attention)
    h, x = add_then_norm(norm, x, attention.reshape(batch, seq, d) @ layer["wo"],
                         layer["mlp_norm"])
    mlp = jax.nn.silu(project(h, layer["w_gate"])) * project(h, layer["w_up"])
    return x, mlp @ layer["w_down"]


def loss(params, tokens, norm, config, project=jnp.matmul, head_norm=None):
    """Mean next-token cross entropy (in float32) of tokens (batch, seq). The
    language-model head stays a plain matmul, after `head_norm` (`norm` if
    None)."""
    x, update = params["embed"][tokens], None
    for layer in params["layers"]:
        x, update = block(x, update, layer, norm, config, project)
    h, _ = add_then_norm(head_norm or norm, x, update, params["final_norm"])
    logits = (h @ params["lm_head"]).astype(jnp.float32)
    log_probs = jax.nn.log_softmax(logits[:, :-1])
    targets = tokens[:, 1:, None]
    return -jnp.mean(jnp.take_along_axis(log_probs, targets, axis=-1))


def train_step(params, tokens, norm, config, project=jnp.matmul, head_norm=None,
               learning_rate=1e-3):
    """One SGD step: (new params, loss)."""
    value, grads = jax.value_and_grad(loss)(params, tokens, norm, config, project, head_norm)
    params = jax.tree.map(lambda p, g: (p - learning_rate * g).astype(p.dtype), params, grads)
    return params, value
