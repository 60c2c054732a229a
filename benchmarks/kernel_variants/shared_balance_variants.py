"""The kernel variants of the H200 run in h200_shared_balance.log (make_variants.py shared_balance).

Why does the seed shape's shared-row forward (bfloat16 32 x 262,144: 32
clusters of 8 blocks of 512 threads, 64 KiB of shared memory each) take
about 13 µs where a row of it takes 9.25 µs among 1,024 rows?

Part 1, balance. ncu (h200_profiles.log) had the SMs active in only 69% of
it. An SM may hold three of its blocks (38 registers a thread), so the 256
blocks could sit on 86 of the 132 SMs. Each variant prints the launch it
chose (cluster, threads, shared memory, clusters resident, launched):
- `pad2`: each block asks for 80 KiB of shared memory, so that an SM holds
  at most two (256 blocks over at least 128 SMs);
- `c4`: clusters of 4 blocks of 1024 threads, 8 vectors (128 KiB) each:
  one block per SM, 128 blocks.

Part 2, the weight. The SASS of the base kernel's stores shows each thread
loading its weight vector k (from L2) just before it writes y's vector k,
and the store depends on it, so a thread's 8 writes wait for 8 round trips
one after the other:
- `w2`: the weight vectors of 2 slots loaded at once, then those 2 written
  (38 registers, as base);
- `w4s`: the same for 4 slots (48 registers: two blocks an SM);
- `now`: no weight at all, y = x * inv (wrong results, on purpose): what
  the weight's loads cost.
"""
from make_variants import SHARED

COMMIT = "8bfe99f"

RESIDENT = "          const int64_t resident = ResidentGroups(kernel, shape, shared_bytes);\n"
REPORT = RESIDENT + (
    "          static bool reported = false;\n"
    "          if (!reported) {\n"
    "            reported = true;\n"
    "            std::fprintf(stderr, \"  shared-row forward: cluster %d, %d threads, %d bytes, \"\n"
    "                         \"%ld clusters resident, %ld launched\\n\", cluster, kSharedRowThreads,\n"
    "                         shared_bytes, static_cast<long>(resident),\n"
    "                         static_cast<long>(std::min(g.rows, resident)));\n"
    "          }\n")
PRINT = [("#include <optional>\n", "#include <cstdio>\n#include <optional>\n"), (RESIDENT, REPORT)]
SIZE = ("          const int shared_bytes =\n"
        "              static_cast<int>(vectors * kSharedRowThreads * 16);\n")
STORE_LOOP = """    for (int k = 0; k < shape.vectors; ++k) {
      const P v[1] = {slot_vector(k)};
      P weight[1];
      LoadVectors(wp, row_vectors, vector_at(k), weight);
      StoreNormalised(v, weight, inv, yp + row * row_vectors, row_vectors,
                      vector_at(k));
    }
"""
NO_WEIGHT = """    for (int k = 0; k < shape.vectors; ++k) {
      const P v[1] = {slot_vector(k)};
      StoreNormalised(v, v, inv, yp + row * row_vectors, row_vectors,
                      vector_at(k));
    }
"""


def weight_groups(n):
    """The stores in groups of n slots, the group's weight vectors loaded at once."""
    return [(STORE_LOOP, f"""    for (int k0 = 0; k0 < shape.vectors; k0 += {n}) {{
      const Place group{{0, 0, at.first + k0 * at.stride, at.stride}};
      P v[{n}], weight[{n}];
      LoadVectors(wp, row_vectors, group, weight);
#pragma unroll
      for (int j = 0; j < {n}; ++j) v[j] = slot_vector(k0 + j);
      StoreNormalised(v, weight, inv, yp + row * row_vectors, row_vectors,
                      group);
    }}
""")]


def weight_groups_serial(n):
    """weight_groups(n), each slot of x read and written in turn."""
    return [(STORE_LOOP, f"""    for (int k0 = 0; k0 < shape.vectors; k0 += {n}) {{
      const Place group{{0, 0, at.first + k0 * at.stride, at.stride}};
      P weight[{n}];
      LoadVectors(wp, row_vectors, group, weight);
#pragma unroll
      for (int j = 0; j < {n}; ++j) {{
        const P v[1] = {{slot_vector(k0 + j)}};
        const P wj[1] = {{weight[j]}};
        StoreNormalised(v, wj, inv, yp + row * row_vectors, row_vectors,
                        vector_at(k0 + j));
      }}
    }}
""")]


VARIANTS = {
    "base": ("the kernels of 8bfe99f", {SHARED: PRINT}),
    # Part 1.
    "pad2": ("shared-row forward blocks asking for 80 KiB: at most two an SM", {SHARED: PRINT + [
        (SIZE, "          const int shared_bytes = std::max(\n"
               "              80 * 1024, static_cast<int>(vectors * kSharedRowThreads * 16));\n")]}),
    "c4": ("shared-row forward in clusters of 4 blocks of 1024 threads (one block an SM)", {SHARED: PRINT + [
        ("constexpr int kSharedRowThreads = 512;", "constexpr int kSharedRowThreads = 1024;"),
        ("for (int cluster = kMaxCluster; cluster >= 2; cluster /= 2) {",
         "for (int cluster = 4; cluster >= 2; cluster /= 2) {")]}),
    # Part 2.
    "w2": ("weights of 2 slots loaded at once", {SHARED: PRINT + weight_groups(2)}),
    "w4s": ("weights of 4 slots loaded at once, each slot of x read and written in turn",
            {SHARED: PRINT + weight_groups_serial(4)}),
    "now": ("no weight loads: y = x * inv (wrong results; what the loads cost)",
            {SHARED: PRINT + [(STORE_LOOP, NO_WEIGHT)]}),
}
