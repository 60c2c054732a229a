"""The kernel variants of the run in h100_small_batch_forward.log (make_variants.py small_batch_forward).

The bfloat16 small batch (512 x 4,096) is the one case whose forward does not
keep ahead of XLA's on the H100: 0.978 to 1.000 times its speed in eight rounds
(../results/rounds/nvidia-h100-80gb-hbm3_small_batch_9e9c7ee.log). Its 4 MiB in and
out stay in L2 along the benchmark's chain, so the op is one short wave of
blocks whose time is mostly latency. Earlier shape trials for it ran in
harnesses that moved it by 10% between rounds (h200_shapes_and_registers.log)
or a microsecond between calls (h100_row_blocks.log), so they could not tell
a few percent apart; the donated benchmark can. Base launches
FastForwardKernel<bfloat16, 2, 2>: 256 blocks of 256 threads, two rows a
block, four 16-byte loads a thread in flight. Each variant launches, for
this case alone, FastForwardKernel<bfloat16, V, R> in blocks of 512 / V
threads (a row's 512 vectors over the block, V a thread) holding R rows:
- `v2r1`: 512 blocks of 256 threads, one row each (2 loads a thread);
- `v1r4`: 128 blocks of 512 threads, four rows each (4 loads);
- `v1r2`: 256 blocks of 512 threads, two rows (2 loads);
- `v1r1`: 512 blocks of 512 threads, one row (1 load);
- `v4r1`: 512 blocks of 128 threads, one row (4 loads, within 40 registers?
  the build log says if ptxas spills).
"""
from make_variants import FAST

COMMIT = "46dcf20"

ANCHOR = "              // A block holds a row, and a grid covers all rows (it holds\n"


def shape(vectors, rows):
    """FastForwardKernel<T, vectors, rows> for 16-bit rows of 512 vectors, 512 rows of them."""
    launch = (
        "              if constexpr (sizeof(T) == 2) {\n"
        "                if (g.rows == 512 && row_vectors == 512) {\n"
        f"                  FastForwardKernel<T, {vectors}, {rows}>\n"
        f"                      <<<static_cast<unsigned>(CeilDiv(g.rows, {rows})),\n"
        f"                         512 / {vectors}, 0, stream>>>(x, w, y, inv_rms, g.rows,\n"
        "                                                row_vectors,\n"
        "                                                Reciprocal(g.row_length),\n"
        "                                                epsilon);\n"
        "                  return CheckLaunch(\"launching the forward kernel\");\n"
        "                }\n"
        "              }\n")
    return {FAST: [(ANCHOR, launch + ANCHOR)]}


VARIANTS = {
    "base": ("the kernels of 46dcf20 (those of 9e9c7ee)", {}),
    "v2r1": ("small batch: 512 blocks of 256 threads, one row each", shape(2, 1)),
    "v1r4": ("small batch: 128 blocks of 512 threads, four rows each", shape(1, 4)),
    "v1r2": ("small batch: 256 blocks of 512 threads, two rows each", shape(1, 2)),
    "v1r1": ("small batch: 512 blocks of 512 threads, one row each", shape(1, 1)),
    "v4r1": ("small batch: 512 blocks of 128 threads, one row each", shape(4, 1)),
}
