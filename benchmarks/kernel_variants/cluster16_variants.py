"""The kernel variants of the H100 run in h100_cluster16.log (make_variants.py cluster16).

h200_shared16.log found the seed shape's shared-row forward (bfloat16 32 x
262,144) faster in clusters of 16 blocks of 32 KiB (`s16`) than of 8 of 64
KiB, on an H200: 11.6 to 11.0 µs at the JAX level, 0.55 and 0.64 µs off the
forward + backward under the profiler. It was not adopted because it made
rows that clusters of 8 take in several rounds slower (64 x 131,080 by a
third, 1,024 x 262,144 by 4%), and float32 rows of 262,144 moved to it from
the split-row kernels and lost at the JAX level. On the H100 the seed
shape's forward + backward is 0.2 to 0.8 µs short of its 80%
(h100_grid_staged.log), so:
- `s16few`: clusters of 16 only for rows that clusters of 8 would take,
  all at once (no more rows than clusters of 8 resident); other rows, and
  float32 rows of 262,144, as before.
"""
from make_variants import COMMON, SHARED
from shared16_variants import SLOTS16

COMMIT = "82ec514"

FEW_ROWS_IN_16 = [
    ("        for (int cluster = kMaxCluster; cluster >= 2; cluster /= 2) {\n",
     "        // Rows that clusters of 8 would all take at once: clusters of 16.\n"
     "        int first = kMaxCluster;\n"
     "        const int64_t vectors8 =\n"
     "            CeilDiv(row_vectors, int64_t{kMaxCluster} * kSharedRowThreads);\n"
     "        if (vectors8 <= kMaxSharedRowVectors &&\n"
     "            g.rows <= ResidentGroups(\n"
     "                          kernel,\n"
     "                          Shape{kMaxCluster, kSharedRowThreads, 1,\n"
     "                                static_cast<int>(vectors8)},\n"
     "                          static_cast<int>(vectors8 * kSharedRowThreads * 16))) {\n"
     "          if (cudaFuncSetAttribute(\n"
     "                  kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==\n"
     "              cudaSuccess) {\n"
     "            first = 16;\n"
     "          } else {\n"
     "            cudaGetLastError();\n"
     "          }\n"
     "        }\n"
     "        for (int cluster = first; cluster >= 2; cluster /= 2) {\n"),
]

VARIANTS = {
    "base": ("the kernels of 82ec514 (those of 4ca2340)", {}),
    "s16few": ("clusters of 16 for rows that clusters of 8 take all at once",
               {COMMON: SLOTS16, SHARED: FEW_ROWS_IN_16}),
}
