"""The kernel variants of the H200 run in part 2 of h200_grid_backward.log (make_variants.py grid_phases).

Each is a copy of gpu_ops/csrc with one change to the grid backward
(rms_norm_grid_backward.cu). Two leave out a step, so that the difference
in time says what the step costs (their results are wrong, and the checks
say so); one moves dy out of registers:
- `nosync`: no grid-wide barrier (each block reads whatever row sums are
  there);
- `nostore`: dx is not written;
- `dysm`: every vector of dy in shared memory, none in registers.
"""
from make_variants import GRID, NO_GRID_DX_STORE, NO_GRID_SYNC

COMMIT = "fb9bfb8"

VARIANTS = {
    "base": ("the kernels as committed", {}),
    "nosync": ("grid backward without its grid-wide barrier (wrong results)", NO_GRID_SYNC),
    "nostore": ("grid backward without writing dx (wrong results)", NO_GRID_DX_STORE),
    "dysm": ("grid backward with all of dy in shared memory", {GRID: [
        ("constexpr int kDyRegisterRows = 3;", "constexpr int kDyRegisterRows = 0;"),
    ]}),
}
