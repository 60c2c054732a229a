"""The kernel variants of the H200 run in h200_grid_costs.log (make_variants.py grid_costs).

The grid backward's bfloat16 case of 32 x 262,144 (the seed shape) takes
longer than its float32 case of 16 x 262,144, which moves the same bytes
with half the values (h200_grid_backward.log: 23 against 20 µs, 17.4
against 12.6 µs without the writes of dx). Each variant leaves out part of
the arithmetic, so that the difference in time says what it costs (their
results are wrong, and the checks say so):
- `light1`: the sums as rows arrive take one value of each vector, not all;
- `light3`: dx is x, written without computing it;
- `nostore`: dx is not written (as in grid_phases).
"""
from make_variants import GRID, GRID_DX_STORE, NO_GRID_DX_STORE

COMMIT = "406ba48"

VARIANTS = {
    "base": ("the kernels as committed", {}),
    "light1": ("grid backward summing one value of each vector (wrong results)", {GRID: [
        ("      for (int e = 0; e < P::kSize; ++e) {\n        const float dy_x",
         "      for (int e = 0; e < 1; ++e) {\n        const float dy_x"),
    ]}),
    "light3": ("grid backward writing x as dx (wrong results)", {GRID: [
        (GRID_DX_STORE, "    reinterpret_cast<P*>(dx)[int64_t{row} * row_vectors + column] = xs[0];\n"),
    ]}),
    "nostore": ("grid backward without writing dx (wrong results)", NO_GRID_DX_STORE),
}
