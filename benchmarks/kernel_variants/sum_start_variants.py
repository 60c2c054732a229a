"""The kernel variants of the run in h200_sum_start.log (make_variants.py sum_start).

Two small changes to FastBackwardKernel for the backward of rows of 1,024,
whose team works through a row about every 2 µs:
- `inv2`: each row's inv_rms loaded two rows ahead instead of one;
- `early`: the backward lets the weight-gradient sum (SumPartials) start as
  soon as every block has started (StartNextKernel at the top, not after the
  rows), so its blocks sit on the SMs with room for them and wait there.
"""
from make_variants import FAST

COMMIT = "8f4b226"

# The lines that load a row's inv_rms: before the loop, and a row ahead in it.
INV_FIRST = "  float inv_next = count > 0 ? invs[0] : 0.0f;  // loaded a row ahead\n"
INV_AHEAD = "    inv_next = i + 1 < count ? invs[i + 1] : 0.0f;\n"
START_SUM = "  StartNextKernel();  // the weight-gradient sum (SumPartials)\n"
SEGMENT = "  const int64_t segment =\n      int64_t{blockIdx.x / shape.cluster} * shape.teams + at.team;\n"

VARIANTS = {
    "base": ("the kernels of 8f4b226 (those of 5926f00)", {}),
    "inv2": ("inv_rms loaded two rows ahead", {FAST: [
        (INV_FIRST,
         "  float inv_next = count > 0 ? invs[0] : 0.0f;  // loaded two rows ahead\n"
         "  float inv_after = count > 1 ? invs[1] : 0.0f;\n"),
        (INV_AHEAD,
         "    inv_next = inv_after;\n    inv_after = i + 2 < count ? invs[i + 2] : 0.0f;\n"),
    ]}),
    "early": ("SumPartials allowed to start once every block has started", {FAST: [
        (START_SUM + "  float* partial =", "  float* partial ="),
        (SEGMENT, START_SUM + SEGMENT),
    ]}),
}
