"""XLA's fusions for the benchmark's forward + backward step (the `xla` implementation).

    python benchmarks/kernel_variants/xla_fusions.py    # from the repository root

For each of three bfloat16 cases, prints the lines of the compiled entry
computation that launch fusions (name, output shapes, operands) and its
root: which kernels XLA runs, and which inputs each one reads. The output of
two runs on an H200 is ../results/nvidia-h200_xla_fusions.log.
"""
import pathlib
import re
import sys

import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import rms_norm_bench as bench  # noqa: E402

for rows, row_len in [(32, 262144), (16384, 1024), (512, 4096)]:
    x = jnp.ones((rows, row_len), jnp.bfloat16)
    w = jnp.ones((row_len,), jnp.bfloat16)
    checked, _ = bench.op_functions(bench.xla_rms_norm)["fwd_bwd"]
    text = checked.lower(x, w, x).compile().as_text()
    print(f"== xla fwd_bwd bfloat16 {rows} x {row_len}: the entry computation")
    for line in text[text.index("ENTRY"):].splitlines():
        if "fusion" in line or "ROOT" in line or "custom-call" in line:
            print("  " + re.sub(r", metadata=\{[^}]*\}", "", line.strip())[:260])
