"""The kernel variants of the H200 run in h200_cluster_start.log (make_variants.py cluster_start).

Kernels whose teams span a cluster start with a cluster barrier
(StartClusterSums: cg's cluster sync, whose arrival carries a memory fence
at GPU scope) before they issue a single load, and the seed shape's
shared-row forward loads its weight vectors one round trip at a time
(h200_shared_balance.log, part 2):
- `sa`: StartClusterSums arrives with a relaxed arrival after the barriers'
  init fence (fence.mbarrier_init), and the wait moves to the first
  ClusterSum, so the loads go out first;
- `w2c`: the shared-row forward loads the weight vectors of 2 slots at once
  (`w2` of shared_balance, whose last group read a shared-memory slot past
  the block's end when a thread held an odd number: now clamped);
- `sa_w2c`: both.
Part 2: `w2c` wrote zeros past a thread's last vector when it held an odd
number (its checks of rows of 131,080 failed; rows of 262,144, 8 vectors
a thread, were right), and one more idea:
- `w2g`: `w2c` with the stores of a pair's second slot guarded;
- `pf`: the shared-row forward prefetches its weight vectors into L1
  (prefetch.global.L1, no registers) as it issues its loads of x, so the
  stores' weight loads find them there;
- `sa_w2g`, `sa_pf`: with `sa`.
"""
from make_variants import COMMON, SHARED
from shared_balance_variants import PRINT, STORE_LOOP

COMMIT = "8bfe99f"

SPLIT_ARRIVE = {COMMON: [
    ("  cg::this_cluster().sync();  // no block sends before every barrier is set\n",
     "  asm volatile(\"barrier.cluster.arrive.relaxed.aligned;\" ::: \"memory\");\n"),
    ("  const int half = call % 2;\n  const uint32_t landed = SharedAddress(&slots.landed[half]);\n",
     "  if (call == 0) asm volatile(\"barrier.cluster.wait.aligned;\" ::: \"memory\");\n"
     "  const int half = call % 2;\n  const uint32_t landed = SharedAddress(&slots.landed[half]);\n"),
]}
WEIGHT_PAIRS = [(STORE_LOOP, """    for (int k0 = 0; k0 < shape.vectors; k0 += 2) {
      const Place group{0, 0, at.first + k0 * at.stride, at.stride};
      P v[2], weight[2];
      LoadVectors(wp, row_vectors, group, weight);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int k = k0 + j;
        v[j] = VectorOrZeros(k < shape.vectors && vector_at(k).first < row_vectors,
                             slot(std::min(k, shape.vectors - 1)));
      }
      StoreNormalised(v, weight, inv, yp + row * row_vectors, row_vectors,
                      group);
    }
""")]

GUARDED_PAIRS = [(STORE_LOOP, """    for (int k0 = 0; k0 < shape.vectors; k0 += 2) {
      const int pair = std::min(2, shape.vectors - k0);
      const Place group{0, 0, at.first + k0 * at.stride, at.stride};
      P v[2], weight[2];
      LoadVectors(wp, row_vectors, group, weight);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int k = k0 + j;
        v[j] = VectorOrZeros(j < pair && vector_at(k).first < row_vectors,
                             slot(k0 + std::min(j, pair - 1)));
      }
      const int end = std::min(row_vectors, at.first + (k0 + pair - 1) * at.stride + 1);
      StoreNormalised(v, weight, inv, yp + row * row_vectors, end, group);
    }
""")]
PREFETCH = [("""    __pipeline_commit();
    __pipeline_wait_prior(0);
    float sum_squares = 0;
""", """    __pipeline_commit();
    for (int k = 0; k < shape.vectors; ++k) {
      const int c = vector_at(k).first;
      if (c < row_vectors) asm volatile("prefetch.global.L1 [%0];" ::"l"(wp + c));
    }
    __pipeline_wait_prior(0);
    float sum_squares = 0;
""")]

VARIANTS = {
    "base": ("the kernels of 8bfe99f", {SHARED: PRINT}),
    "sa": ("cluster start: relaxed arrival, wait at the first cluster sum", {**SPLIT_ARRIVE, SHARED: PRINT}),
    "w2c": ("shared-row forward: weights of 2 slots at once", {SHARED: PRINT + WEIGHT_PAIRS}),
    "sa_w2c": ("sa and w2c", {**SPLIT_ARRIVE, SHARED: PRINT + WEIGHT_PAIRS}),
    # Part 2.
    "w2g": ("w2c, the second slot's store guarded", {SHARED: PRINT + GUARDED_PAIRS}),
    "pf": ("shared-row forward: weight prefetched into L1 with the loads of x", {SHARED: PRINT + PREFETCH}),
    "sa_w2g": ("sa and w2g", {**SPLIT_ARRIVE, SHARED: PRINT + GUARDED_PAIRS}),
    "sa_pf": ("sa and pf", {**SPLIT_ARRIVE, SHARED: PRINT + PREFETCH}),
}
