"""The kernel variants of the H200 run in h200_strided_rows.log (make_variants.py strided_rows).

Deeper rings made the backward slower, even after its loop was trimmed
(h200_backward_stages.log): more bytes in flight did not buy time. There,
each thread team took a segment of consecutive rows (16 rows of 1,024 for
16384 x 1024), so the teams at work at one time read from as many places
in dy and x as there are teams. Commit 1b0863a gives team s rows s,
s + num_partials, s + 2 * num_partials, ... instead: at any one time the
teams read neighbouring rows. `base` is that commit, `contig` the kernels
of df30876 (consecutive rows), `s4` the commit with 4 ring stages.
"""
COMMIT = "1b0863a"

VARIANTS = {
    "base": ("the kernels of 1b0863a (every num_partials-th row)", {}),
    "contig": ("the kernels of df30876 (segments of consecutive rows)", {}, "df30876"),
    "s4": ("base with 4 ring stages", {"rms_norm_fast.cu": [
        ("constexpr int kStages = 3;", "constexpr int kStages = 4;")]}),
}
