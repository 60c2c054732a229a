"""The kernel variants of the H200 run in h200_backward_stages.log (make_variants.py backward_stages).

After commit cd9f8dd trimmed the backward's per-row instructions, its
bfloat16 backward of 16384 x 1024 took about as long under ncu's base clocks
as at full clocks (32.7 against 33.0 µs, h200_row_overhead.log): time set by
how many bytes are in flight, not by issue. Each variant deepens the
shared-memory rings (kStages, for the cluster forward's ring too): with S
stages a team has S - 1 rows on their way. Before that commit, 4 to 6 stages
had been slower (h200_fixed_costs.log).
"""
COMMIT = "df30876"
STAGES = "constexpr int kStages = 3;"

VARIANTS = {
    "base": ("the kernels of df30876 (3 stages)", {}),
    **{f"s{n}": (f"{n} ring stages", {"rms_norm_fast.cu": [(STAGES, f"constexpr int kStages = {n};")]})
       for n in (4, 5, 6)},
}
