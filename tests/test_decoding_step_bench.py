"""The decoding-step benchmark decodes what the full model computes, writes
its cache in place, and times every norm at every batch (small sizes)."""

import dataclasses
import importlib.util
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

BENCHMARKS = pathlib.Path(__file__).parents[1] / "benchmarks"
TINY = ["--layers", "2", "--d-model", "64", "--heads", "4", "--ffn", "128", "--vocab", "256",
        "--cache", "16", "--batches", "1", "3"]


def _bench():
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("decoding_step_bench",
                                                  BENCHMARKS / "decoding_step_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.fixture(scope="module")
def bench():
    return _bench()


@pytest.fixture(scope="module")
def records(bench, tmp_path_factory):
    out = tmp_path_factory.mktemp("decoding") / "step.json"
    bench.main(["--out", str(out), "--steps", "2", "--repeats", "2", *TINY])
    return json.loads(out.read_text())


def test_every_norm_is_timed_at_every_batch(records):
    assert {(r["batch"], r["norm"]) for r in records} == {
        (batch, norm) for batch in (1, 3) for norm in ("jnp", "gpu_ops", "gpu_ops_residual")}
    for r in records:
        assert r["median_us"] > 0 and r["jnp_over_this"] > 0
        assert r["config"]["seq"] == 16 and r["commit"]
        if r["norm"] == "jnp":
            assert r["jnp_over_this"] == 1


def _full_sequence_logits(bench, llama_decoder, params, tokens, config):
    """The last position's logits of the whole sequence at once, with causal
    attention: what decoding it token by token must give."""
    norm = bench.NORMS["jnp"]
    batch, seq = tokens.shape
    heads = (batch, seq, config.heads, config.head_dim)
    x, update = params["embed"][tokens], None
    for layer in params["layers"]:
        h, x = llama_decoder.add_then_norm(norm, x, update, layer["attn_norm"])
        q = llama_decoder.rotary(norm((h @ layer["wq"]).reshape(heads), layer["q_norm"]))
        k = llama_decoder.rotary(norm((h @ layer["wk"]).reshape(heads), layer["k_norm"]))
        v = (h @ layer["wv"]).reshape(heads)
        attention = jax.nn.dot_product_attention(q, k, v, is_causal=True)
        h, x = llama_decoder.add_then_norm(
            norm, x, attention.reshape(batch, seq, config.d_model) @ layer["wo"],
            layer["mlp_norm"])
        update = (jax.nn.silu(h @ layer["w_gate"]) * (h @ layer["w_up"])) @ layer["w_down"]
    h, _ = llama_decoder.add_then_norm(norm, x, update, params["final_norm"])
    return (h[:, -1] @ params["lm_head"]).astype(jnp.float32)


@pytest.mark.parametrize("norm", ["jnp", "gpu_ops", "gpu_ops_residual"])
def test_decoding_token_by_token_gives_the_full_sequences_logits(bench, norm):
    import llama_decoder
    config = dataclasses.replace(bench.CPU_CONFIG, batch=2, seq=8, dtype="float32")
    params = bench.init_params(config, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (2, 6), 0, config.vocab)
    step = bench.compiled_step(norm, config)
    cache = bench.empty_cache(config)
    for position in range(tokens.shape[1]):
        logits, cache = step(params, cache, tokens[:, position], jnp.int32(position))
    expected = _full_sequence_logits(bench, llama_decoder, params, tokens, config)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)


def test_the_step_writes_the_donated_cache_in_place(bench):
    config = dataclasses.replace(bench.CPU_CONFIG, batch=2)
    params = bench.init_params(config, jax.random.key(0))
    step = bench.compiled_step("gpu_ops_residual", config)
    cache, tokens = bench.empty_cache(config), jnp.zeros(2, jnp.int32)
    compiled = step.lower(params, cache, tokens, jnp.int32(3)).compile().as_text()
    assert "input_output_alias" in compiled
    cache_shape = "bf16[2,32,4,16]"
    assert not [line for line in compiled.splitlines()
                if f"{cache_shape}{{" in line and " copy(" in line]
    _, new_cache = step(params, cache, tokens, jnp.int32(3))
    assert all(array.is_deleted() for pair in cache for array in pair)
    assert new_cache[0][0].shape == (2, 32, 4, 16)
