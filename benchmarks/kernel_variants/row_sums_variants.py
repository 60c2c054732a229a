"""The kernel variants of the H200 run in h200_row_sums.log (make_variants.py row_sums).

ncu on the grid backward of the seed shape (h200_grid_costs.log) counted
22% of its memory sectors as excess: after the grid-wide barrier, each lane
of a warp read one block's sum of a row from row_sums[block][row], a sector
for 4 bytes, and all 128 blocks read them at once. Commit a238727 stores
row_sums[row][block] instead, so that a warp reads whole lines, and keeps
four loads in flight. Variants of that commit:
- `strided`: the layout and loop before it;
- `nosync`: no grid-wide barrier (wrong results), what the barrier costs;
- `nototal`: the row sums are not read (wrong results), what reading
  them costs.
"""
from make_variants import GRID, NO_GRID_SYNC

COMMIT = "a238727"

VARIANTS = {
    "base": ("the kernels as committed", {}),
    "strided": ("grid backward with row_sums[block][row], as before", {GRID: [
        ("    row_sums[int64_t{r} * gridDim.x + blockIdx.x] = sum;",
         "    row_sums[int64_t{blockIdx.x} * rows + r] = sum;"),
        ("    const float* sums = row_sums + int64_t{r} * gridDim.x;\n"
         "#pragma unroll 4  // the loads in flight together\n"
         "    for (int b = lane; b < static_cast<int>(gridDim.x); b += kWarpSize) {\n"
         "      sum += sums[b];\n",
         "    for (int b = lane; b < static_cast<int>(gridDim.x); b += kWarpSize) {\n"
         "      sum += row_sums[int64_t{b} * rows + r];\n"),
    ]}),
    "nosync": ("grid backward without its grid-wide barrier (wrong results)", NO_GRID_SYNC),
    "nototal": ("grid backward not reading the row sums (wrong results)", {GRID: [
        ("      sum += sums[b];\n", "      sum += 0 * b;\n"),
    ]}),
}
