"""The kernels profiled in h200_profiles.log (make_variants.py profiles): base alone.

run_set.sh profiles runs ncu's full set of sections, and the SASS lines with
the most warp-stall samples, on the kernels of the cases that still miss
their targets: the seed shape's forward (the shared-row forward), the small
batch's forward and the backward of 16,384 rows of 1,024.
"""
COMMIT = "2c9a3a3"

VARIANTS = {"base": ("the kernels as committed", {})}
