"""The kernel variants of the H200 run in h200_row_overhead.log (make_variants.py row_overhead).

ncu (h200_profiles.log) had the backward of bfloat16 rows of 1,024 issuing
an instruction in 68% of its cycles, about 350 instructions per thread for
each row of 8 values. Commit cd9f8dd trims the per-row bookkeeping of
FastBackwardKernel: `base` is that commit, `before` the kernels of the
commit before it, and two variants put back one part each, to see what it
was worth:
- `div`: the correction divided by the row length again (an IEEE division,
  about a dozen instructions and a branch), not multiplied by its inverse;
- `wsum`: teams of up to 4 warps add up their warp sums with a second warp
  sum again (5 shuffles), not by reading them one by one.
"""
from make_variants import COMMON, FAST

COMMIT = "cd9f8dd"
BEFORE = "1e044c3"

VARIANTS = {
    "base": ("the kernels of cd9f8dd (leaner backward loop)", {}),
    "before": ("the kernels of 1e044c3 (before it)", {}, BEFORE),
    "div": ("base, dividing by the row length", {FAST: [
        ("        inv * inv * TeamSum<kClustered>(dot, shape, at, sums, calls) *\n"
         "        inv_row_length;",
         "        inv * inv * TeamSum<kClustered>(dot, shape, at, sums, calls) /\n"
         "        row_length;"),
        ("  float inv_next = count > 0 ? invs[0] : 0.0f;",
         "  const float row_length = 1.0f / inv_row_length;\n"
         "  float inv_next = count > 0 ? invs[0] : 0.0f;"),
    ]}),
    "wsum": ("base, teams of few warps adding up their warp sums by a warp sum",
             {COMMON: [("constexpr int kFewWarps = 4;", "constexpr int kFewWarps = 0;")]}),
}
