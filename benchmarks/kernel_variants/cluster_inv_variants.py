"""The kernel variants of the run in h200_cluster_inv.log (make_variants.py cluster_inv).

In h200_sum_start.log, loading inv_rms two rows ahead in FastBackwardKernel
(`inv2`) took the bfloat16 backward of 16384 x 16,384 (a cluster of two
blocks a row) from 449 to 424 µs, but the backwards of rows a block holds
1 to 2% slower. Here only the cluster kernels do it:
- `inv2c`: inv_rms loaded two rows ahead where a row takes a cluster, one
  row ahead otherwise.
"""
from make_variants import FAST
from sum_start_variants import INV_AHEAD, INV_FIRST

COMMIT = "8f4b226"

VARIANTS = {
    "base": ("the kernels of 8f4b226 (those of 5926f00)", {}),
    "inv2c": ("inv_rms loaded two rows ahead in the cluster backward", {FAST: [
        (INV_FIRST,
         INV_FIRST + "  float inv_after = kClustered && count > 1 ? invs[1] : 0.0f;  // two\n"),
        (INV_AHEAD,
         "    if constexpr (kClustered) {\n"
         "      inv_next = inv_after;\n"
         "      inv_after = i + 2 < count ? invs[i + 2] : 0.0f;\n"
         "    } else {\n  " + INV_AHEAD + "    }\n"),
    ]}),
}
