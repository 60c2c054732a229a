"""The kernel variants of the H200 run in h200_dw_late.log (make_variants.py dw_late).

In the grid backward of the seed shape, the sums taken as rows arrive cost
1.2 µs in bfloat16 (h200_grid_costs.log, light1), while the arithmetic of
dx, after the grid-wide barrier, cost nothing (light3): there the writes
set the pace. Each variant moves arithmetic from before the barrier to
after it:
- `late`: the weight gradient dy * x * inv is added up after the barrier,
  as dx is written, not as the rows arrive.
"""
from make_variants import GRID

COMMIT = "5258078"

VARIANTS = {
    "base": ("the kernels as committed", {}),
    "late": ("grid backward adding up the weight gradient after the barrier", {GRID: [
        ("        dwv[e] += dy_x * inv;\n", ""),
        ("                       row_vectors, at);\n  }\n",
         "                       row_vectors, at);\n"
         "#pragma unroll\n"
         "    for (int e = 0; e < P::kSize; ++e) {\n"
         "      dwv[e] += ToAcc<float>(dys[0].v[e]) * ToAcc<float>(xs[0].v[e]) * inv;\n"
         "    }\n  }\n"),
    ]}),
}
