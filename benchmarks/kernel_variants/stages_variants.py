"""The kernel variants of the H200 run in h200_stages.log (make_variants.py stages).

The seed shape's kernels read all of their input before they write any of
their output: in the grid backward (rms_norm_grid_backward.cu) every block
waits at the grid-wide barrier, and in the shared-row forward
(rms_norm_shared_rows.cu) 32 clusters take one row each, all at once. Each
variant lets writes start while later rows still arrive:
- `g2`, `g4`: the grid backward takes its rows in 2 or 4 stages
  (kGridStages), each with its own barrier, and writes a stage's dx before
  it waits for the next stage's rows; `g2` holds 2 of dy's vectors in
  registers, not 3, so that ptxas does not spill (`d2` is that change
  alone);
- `f2`: each block of the shared-row forward holds two rows
  (kSharedRowBuffers): a cluster loads its next row while it adds up and
  writes the current one;
- `g2f2`: `g2` and `f2` together.
"""
from make_variants import GRID, SHARED

COMMIT = "7426615"

GRID_STAGES = "constexpr int kGridStages = 1;"
DY_REGISTERS = "constexpr int kDyRegisterRows = 3;"
BUFFERS = "constexpr int kSharedRowBuffers = 1;"


def grid(stages, dy_registers):
    return [(GRID_STAGES, f"constexpr int kGridStages = {stages};"),
            (DY_REGISTERS, f"constexpr int kDyRegisterRows = {dy_registers};")]


TWO_BUFFERS = [(BUFFERS, "constexpr int kSharedRowBuffers = 2;")]

VARIANTS = {
    "base": ("the kernels as committed", {}),
    "d2": ("grid backward with 2 of dy's vectors in registers", {GRID: grid(1, 2)}),
    "g2": ("grid backward in 2 stages, 2 of dy's vectors in registers", {GRID: grid(2, 2)}),
    "g4": ("grid backward in 4 stages", {GRID: grid(4, 3)}),
    "f2": ("shared-row forward holding two rows a block", {SHARED: TWO_BUFFERS}),
    "g2f2": ("g2 and f2", {GRID: grid(2, 2), SHARED: TWO_BUFFERS}),
}
