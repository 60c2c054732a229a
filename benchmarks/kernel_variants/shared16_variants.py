"""The kernel variants of the H200 run in h200_shared16.log (make_variants.py shared16).

The seed shape's shared-row forward (bfloat16 32 x 262,144) runs 32
clusters of 8 blocks of 64 KiB: 256 blocks on 132 SMs, which hold up to
three each, so some SMs move three blocks' bytes while the average is under
two. Clusters of 16 blocks (a non-portable size on Hopper) of 32 KiB make
512 blocks, about four an SM, if an SM holds four (2,048 threads).
- `slots16`: TeamSum's slots for up to 16 blocks' sums (a control: the
  other cluster kernels' static shared memory grows by 64 bytes);
- `s16`: `slots16`, and the shared-row forward tries clusters of 16 first.
  Float32 rows of 262,144 then fit it too (64 KiB a block), where they
  took the split-row kernels.
The kernel takes 40 registers, so an SM holds three of its 512-thread
blocks, not four: 396 blocks on an H200, fewer than the seed shape's 512 in
clusters of 16. Part 2 (second call) adds:
- `s16b4`: `s16` with the kernel capped at 32 registers (four blocks an SM);
- `s16t256`: `s16` with blocks of 256 threads (rows of 262,144 then take
  clusters of 16, 8 vectors a thread; up to six blocks an SM).
`s16b4`, with room for every cluster at once, was no faster than `base`:
the gain of `s16` is not the balance of blocks over SMs. Part 3 (third call) asks whether it comes
from the rows of its second round being read while the first round's are
written: fewer clusters than rows, each taking several rows in turn, so
that a cluster's loads of its next row follow its stores of the last:
- `r2`, `r4`: clusters of 8 (as `base`), a cluster for every 2 or 4 rows;
- `s16r2`: `s16` with a cluster for every 2 rows.
"""
from make_variants import COMMON, SHARED

COMMIT = "cc6cf24"

SLOTS16 = [("  float blocks[2][kMaxCluster];\n", "  float blocks[2][16];\n")]
CLUSTER16 = [
    ("        for (int cluster = kMaxCluster; cluster >= 2; cluster /= 2) {\n",
     "        if (cudaFuncSetAttribute(\n"
     "                kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=\n"
     "            cudaSuccess) {\n"
     "          cudaGetLastError();\n"
     "          return std::nullopt;\n"
     "        }\n"
     "        for (int cluster = 16; cluster >= 2; cluster /= 2) {\n"),
]

LAUNCH_BOUNDS = "__global__ void __launch_bounds__(kSharedRowThreads)\n"
FOUR_BLOCKS = [(LAUNCH_BOUNDS, "__global__ void __launch_bounds__(kSharedRowThreads, 4)\n")]
THREADS_256 = [("constexpr int kSharedRowThreads = 512;\n", "constexpr int kSharedRowThreads = 256;\n")]

GROUPS = "std::min(g.rows, resident),"


def rows_per_cluster(n):
    """An edit that launches a cluster for every n rows (at most as many as run at once)."""
    return [(GROUPS, f"std::min(CeilDiv(g.rows, int64_t{{{n}}}), resident),")]


VARIANTS = {
    "base": ("the kernels of cc6cf24 (those of e9da665)", {}),
    "slots16": ("TeamSum's slots hold 16 blocks' sums", {COMMON: SLOTS16}),
    "s16": ("the shared-row forward in clusters of up to 16 blocks",
            {COMMON: SLOTS16, SHARED: CLUSTER16}),
    "s16b4": ("s16, the shared-row forward capped at 32 registers",
              {COMMON: SLOTS16, SHARED: CLUSTER16 + FOUR_BLOCKS}),
    "s16t256": ("s16 with 256-thread blocks",
                {COMMON: SLOTS16, SHARED: CLUSTER16 + THREADS_256}),
    "r2": ("a shared-row cluster for every 2 rows", {SHARED: rows_per_cluster(2)}),
    "r4": ("a shared-row cluster for every 4 rows", {SHARED: rows_per_cluster(4)}),
    "s16r2": ("s16 with a cluster for every 2 rows",
              {COMMON: SLOTS16, SHARED: CLUSTER16 + rows_per_cluster(2)}),
}
