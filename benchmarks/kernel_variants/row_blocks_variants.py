"""The kernel variants of the run in h100_row_blocks.log (make_variants.py row_blocks).

The bfloat16 forward of rows of 16,384 reaches 93% of the copy bandwidth
on an H100 and on an H200, where rows of 8,192 reach 98%. Its blocks of 1024
threads take up to 64 registers each, so an SM holds one block, and the
block's loads pause at its barrier (PrefetchForwardKernel loads the next
row before it to make up for that). float32 rows of 16,384 (one 1024-thread
block per row as well, FastForwardKernel) reach 100% on the H100.
RowForwardKernel (the kernel commit 5926f00 adopted, the same code as was
timed) normalises one row per block, holds only x in
registers and loads each weight vector just before the store that needs it:
ptxas fits it in 32 registers without a spill (nvcc 13.0, sm_90; float32 of
4 vectors, 16-bit of 1 or 2), so an SM holds two blocks of 1024 threads and
one block's loads run while the other waits at its barrier.
- `rowbig`: RowForwardKernel for blocks of more than 512 threads (rows of
  16,384 in every dtype);
- `rowall`: RowForwardKernel for every row a block holds.
"""
from make_variants import FAST, between, source

COMMIT = "c5fab36"

# The kernel as commit 5926f00 adopted it (its comment holds this run's figures).
ROW_FORWARD_KERNEL = between(source("5926f00", FAST), "// The forward of one row per block",
                             "// The forward for rows spread over a cluster of blocks")

KERNEL_PLACE = "// The forward for rows spread over a cluster of blocks (rows too long for\n"
DISPATCH_PLACE = "              if constexpr (kRows > 1) {\n"


def row_forward(condition):
    """RowForwardKernel for the rows a block holds where `condition` holds."""
    launch = (
        f"              if (shape.cluster == 1 && {condition} && g.rows <= kMaxGrid) {{\n"
        "                RowForwardKernel<T, kVectors>\n"
        "                    <<<static_cast<unsigned>(g.rows), shape.team, 0, stream>>>(\n"
        "                        x, w, y, inv_rms, row_vectors, row_length, epsilon);\n"
        "                return CheckLaunch(\"launching the forward kernel\");\n"
        "              }\n")
    return {FAST: [(KERNEL_PLACE, ROW_FORWARD_KERNEL + KERNEL_PLACE),
                   (DISPATCH_PLACE, launch + DISPATCH_PLACE)]}


VARIANTS = {
    "base": ("the kernels of c5fab36", {}),
    "rowbig": ("RowForwardKernel (two 1024-thread blocks per SM) for blocks of more than 512 threads",
               row_forward("shape.team > kMaxThreads / 2")),
    "rowall": ("RowForwardKernel for every row a block holds", row_forward("true")),
}
