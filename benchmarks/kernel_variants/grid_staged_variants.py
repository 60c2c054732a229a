"""The kernel variants of the H100 run in h100_grid_staged.log (make_variants.py grid_staged).

The grid backward (rms_norm_grid_backward.cu) writes no dx before every
block has read all of its x and dy, so the memory reads, then writes, never
both. h200_stages.log took the rows in stages, each with a grid-wide barrier
of its own, and lost (bfloat16 32 x 262,144: 23.6 to 26.3 µs in 2 stages),
but two things have changed since: each barrier was followed by the slow,
strided reading of the row sums that h200_row_sums.log later replaced
(24.0 to 21.5 µs), and every row was requested at the start, so that a
stage's last rows could arrive as late as any. Here, on today's kernel:
- `g2`, `g4`: the rows in 2 or 4 stages, every row requested at the start
  (h200_stages.log's `g2` and `g4` with today's reading of the row sums);
- `s2`, `s4`: the same stages, with the rows requested in stage order: a
  thread requests its row j + (the first stage's rows) once its row j has
  arrived, so the memory serves one stage's rows before the next's, and a
  stage's dx is written while the next stage's rows arrive;
- `s53`, `s62`, `s71`: `s2` with stages of 5 and 3, 6 and 2, 7 and 1 rows.
`s2` and the uneven stages hold 2 of dy's vectors in registers, not 3, so
that ptxas does not spill (as h200_stages.log's `g2` did; there `d2`, that
change alone, changed nothing). Part 1 of the log ran commit 345463d's
texts of `s2`, `s4`, `g2` and `g4`, the same stages written for one size;
written as here (commit 277bbe5 on), `g2` spills 8 bytes in bfloat16.
"""
from make_variants import GRID, between, source

COMMIT = "3c90ba2"


def staged(ends, in_order):
    """The rows in stages ending at rows `ends`; requested in stage order if `in_order`."""
    order = ("its row j + kFirstIssued once row j has\n  // arrived" if in_order
             else "every row at the start")
    issue = f"""  // Rows in stages that end at rows {", ".join(map(str, ends))} of a thread, each with
  // its own grid-wide barrier; a thread requests {order}.
  constexpr bool kInOrder = {"true" if in_order else "false"};
  constexpr int kFirstIssued = kInOrder ? {ends[0]} : kMaxGridRows;
  P dy_registers[kDyRegisterRows];
  auto issue = [&](int j) {{
    const int64_t at_row = int64_t{{row_of(j)}} * row_vectors + column;
    if (holds(j)) CopyLastUse(slot(j), xp + at_row);
    if (j < kDyRegisterRows) {{
      dy_registers[j] = VectorOrZeros<kLastUse>(holds(j), dyp + at_row);
    }} else if (holds(j)) {{
      CopyLastUse(dy_slot(j), dyp + at_row);
    }}
    __pipeline_commit();
  }};
#pragma unroll
  for (int j = 0; j < kFirstIssued; ++j) issue(j);
"""
    return issue


STAGE = """  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps_per_group = columns / kWarpSize;
  float dwv[P::kSize] = {};
  auto grid = cooperative_groups::this_grid();
  // One stage: each thread's rows kFirst to kEnd - 1 (constants, so that
  // every loop over them unrolls).
  auto stage = [&](auto first, auto end) {
    constexpr int kFirst = decltype(first)::value;
    constexpr int kEnd = decltype(end)::value;
    const int first_row = kFirst * groups;
    const int end_row = std::min(rows, kEnd * groups);
#pragma unroll
    for (int j = kFirst; j < kEnd; ++j) {
      // Groups committed before this row: kFirstIssued, plus one per row
      // before it whose row kFirstIssued further on it requested.
      constexpr int kMaxLater = kMaxGridRows - kFirstIssued;
      const int committed =
          kFirstIssued + (kInOrder ? (j < kMaxLater ? j : kMaxLater) : 0);
      __pipeline_wait_prior(committed - 1 - j);  // row j's copies are in
      float sum = 0;
      if (holds(j)) {
        const P xv = *slot(j);
        const P dyv = dy_of(j);
        const float inv = row_inv[row_of(j)];
#pragma unroll
        for (int e = 0; e < P::kSize; ++e) {
          const float dy_x = ToAcc<float>(dyv.v[e]) * ToAcc<float>(xv.v[e]);
          sum += dy_x * ToAcc<float>(wv[0].v[e]);
          dwv[e] += dy_x * inv;
        }
      }
      if (kInOrder && j + kFirstIssued < kMaxGridRows) issue(j + kFirstIssued);
      sum = WarpSum(sum);  // a warp lies within one group: same rows
      if (lane == 0 && j < rows_per_thread) warp_sums[j][warp] = sum;
    }
    __syncthreads();
    for (int r = first_row + threadIdx.x; r < end_row; r += blockDim.x) {
      const int first_warp = (r % groups) * warps_per_group;
      float sum = 0;
      for (int k = 0; k < warps_per_group; ++k) {
        sum += warp_sums[r / groups][first_warp + k];
      }
      row_sums[int64_t{r} * gridDim.x + blockIdx.x] = sum;
    }
    grid.sync();  // every block's sums of the stage's rows are written
    for (int r = first_row + warp; r < end_row; r += blockDim.x / kWarpSize) {
      float sum = 0;
      const float* sums = row_sums + int64_t{r} * gridDim.x;
#pragma unroll 4  // the loads in flight together
      for (int b = lane; b < static_cast<int>(gridDim.x); b += kWarpSize) {
        sum += sums[b];
      }
      sum = WarpSum(sum);
      if (lane == 0) row_totals[r] = sum * inverse_length;  // the mean
    }
    __syncthreads();
#pragma unroll
    for (int j = kFirst; j < kEnd; ++j) {
      if (!holds(j)) continue;
      const int row = row_of(j);
      const float inv = row_inv[row];
      const float correction = inv * inv * row_totals[row];
      const P dys[1] = {dy_of(j)};
      const P xs[1] = {*slot(j)};
      StoreInputGradient(dys, xs, wv, inv, correction,
                         reinterpret_cast<P*>(dx) + int64_t{row} * row_vectors,
                         row_vectors, at);
    }
  };
"""


def stages(ends):
    """STAGE, then a call of it for each stage (a stage past the rows a
    thread holds, the same in every block, is left out)."""
    calls, first = [], 0
    for end in ends:
        call = (f"stage(std::integral_constant<int, {first}>{{}}, "
                f"std::integral_constant<int, {end}>{{}});")
        calls.append(f"  {call}\n" if first == 0 else f"  if ({first} < rows_per_thread) {call}\n")
        first = end
    return STAGE + "".join(calls)


# The committed kernel's parts that the variants replace: its loads, every
# row's at the start; and its phases, from the first row's wait to the last
# store of dx.
LOADS = ("  // 1. Load (row j's vectors", "  auto dy_of = ")
PHASES = ("  const int lane = threadIdx.x % kWarpSize;\n",
          "  // The weight gradient of the block's columns")


def variant(ends, in_order, dy_registers=3):
    committed = source(COMMIT, GRID)
    return {GRID: [("#include <optional>\n", "#include <optional>\n#include <type_traits>\n"),
                   (between(committed, *LOADS), staged(ends, in_order)),
                   (between(committed, *PHASES), stages(ends)),
                   ("constexpr int kDyRegisterRows = 3;",
                    f"constexpr int kDyRegisterRows = {dy_registers};")]}


VARIANTS = {
    "base": ("the kernels as committed", {}),
    "g2": ("grid backward in 2 stages, every row requested at the start", variant((4, 8), False)),
    "g4": ("grid backward in 4 stages, every row requested at the start",
           variant((2, 4, 6, 8), False)),
    "s2": ("grid backward in 2 stages, rows requested in stage order, 2 of dy's vectors in "
           "registers (with 3 ptxas spilled)", variant((4, 8), True, dy_registers=2)),
    "s4": ("grid backward in 4 stages, rows requested in stage order", variant((2, 4, 6, 8), True)),
    "s53": ("s2 with stages of 5 and 3 rows", variant((5, 8), True, dy_registers=2)),
    "s62": ("s2 with stages of 6 and 2 rows", variant((6, 8), True, dy_registers=2)),
    "s71": ("s2 with stages of 7 and 1 rows", variant((7, 8), True, dy_registers=2)),
}
