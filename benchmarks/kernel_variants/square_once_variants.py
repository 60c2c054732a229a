"""The kernel variants of the run in h200_square_once.log (make_variants.py square_once).

The float32 seed shape's forward trails XLA's (H200: 23.6 against 19.7 µs,
../results/nvidia-h200.json). Under the profiler its first pass
(ChunkSumsKernel) takes 9.5 µs where XLA's reduction of the same x takes
5.4 µs (../results/nvidia-h200_timeline.log). The forward hands that pass x
twice (a = b = x, the sum of a * b), so each thread loads every vector of x
twice, into two sets of registers:
- `once`: the forward's first pass loads x once and adds up its squares
  (a template flag, so the backward's kernel stays as it is);
- `once_fwd`: `once`, with the forward's first pass taking the chunks
  first to last, as XLA's reduction does (commit 2ac71a9 reversed the order
  while the pass still loaded x twice).
"""
from make_variants import SPLIT

COMMIT = "090fe2e"

TEMPLATE = ("template <typename T, int kVectors>\n"
            "__global__ void __launch_bounds__(kSplitThreads)\n"
            "    ChunkSumsKernel(")
LOADS_AND_SUM = """    P av[kVectors], bv[kVectors], wv[kVectors];
    LoadVectors(reinterpret_cast<const P*>(a) + row * row_vectors, row_vectors,
                at, av);
    LoadVectors(reinterpret_cast<const P*>(b) + row * row_vectors, row_vectors,
                at, bv);
    if (weight != nullptr) {
      LoadVectors(reinterpret_cast<const P*>(weight), row_vectors, at, wv);
    }
    float sum = 0;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
#pragma unroll
      for (int e = 0; e < P::kSize; ++e) {
        const float w = weight != nullptr ? ToAcc<float>(wv[k].v[e]) : 1.0f;
        sum += ToAcc<float>(av[k].v[e]) * ToAcc<float>(bv[k].v[e]) * w;
      }
    }
"""
SQUARES_ONCE = """    P av[kVectors], bv[kVectors], wv[kVectors];
    LoadVectors(reinterpret_cast<const P*>(a) + row * row_vectors, row_vectors,
                at, av);
    if constexpr (!kSquares) {
      LoadVectors(reinterpret_cast<const P*>(b) + row * row_vectors,
                  row_vectors, at, bv);
      LoadVectors(reinterpret_cast<const P*>(weight), row_vectors, at, wv);
    }
    float sum = 0;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
#pragma unroll
      for (int e = 0; e < P::kSize; ++e) {
        const float va = ToAcc<float>(av[k].v[e]);
        if constexpr (kSquares) {
          sum += va * va;
        } else {
          sum += va * ToAcc<float>(bv[k].v[e]) * ToAcc<float>(wv[k].v[e]);
        }
      }
    }
"""
LAUNCH = """  ChunkSumsKernel<T, kVectors>
      <<<Blocks(g.rows * split->chunks), kSplitThreads, 0, stream>>>(
          a, b, weight, split->chunk_sums, g.rows, split->row_vectors,
          split->chunks);
"""
LAUNCH_BY_KIND = """  const unsigned blocks = Blocks(g.rows * split->chunks);
  if (b == nullptr) {
    ChunkSumsKernel<T, kVectors, true><<<blocks, kSplitThreads, 0, stream>>>(
        a, b, weight, split->chunk_sums, g.rows, split->row_vectors,
        split->chunks);
  } else {
    ChunkSumsKernel<T, kVectors, false><<<blocks, kSplitThreads, 0, stream>>>(
        a, b, weight, split->chunk_sums, g.rows, split->row_vectors,
        split->chunks);
  }
"""
ONCE = [
    (TEMPLATE, TEMPLATE.replace("int kVectors>", "int kVectors, bool kSquares>")),
    (LOADS_AND_SUM, SQUARES_ONCE),
    (LAUNCH, LAUNCH_BY_KIND),
    ("SumChunks<T, kVectors>(stream, b.chunk_sums, g, x, x,\n"
     "                                              nullptr, &split)",
     "SumChunks<T, kVectors>(stream, b.chunk_sums, g, x,\n"
     "                                              nullptr, nullptr, &split)"),
]
REVERSED = "    const int64_t item = rows * chunks - 1 - step;  // last to first\n"

VARIANTS = {
    "base": ("the kernels of 090fe2e (those of b42163d)", {}),
    "once": ("the split forward's first pass loads x once", {SPLIT: ONCE}),
    "once_fwd": ("`once`, its first pass over the chunks first to last", {SPLIT: ONCE + [
        (REVERSED,
         "    const int64_t item = kSquares ? step : rows * chunks - 1 - step;\n")]}),
}
