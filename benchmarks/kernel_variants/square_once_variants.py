"""The kernel variants of the run in h200_square_once.log (make_variants.py square_once).

The float32 seed shape's forward trails XLA's (H200: 23.6 against 19.7 µs,
../results/nvidia-h200.json). Under the profiler its first pass
(ChunkSumsKernel) takes 9.5 µs where XLA's reduction of the same x takes
5.4 µs (../results/earlier_runs/nvidia-h200_timeline_c66f2b7.log). The forward hands that pass x
twice (a = b = x, the sum of a * b), so each thread loads every vector of x
twice, into two sets of registers:
- `once`: the forward's first pass loads x once and adds up its squares
  (a template flag, so the backward's kernel stays as it is);
- `once_fwd`: `once`, with the forward's first pass taking the chunks
  first to last, as XLA's reduction does (commit 2ac71a9 reversed the order
  while the pass still loaded x twice).
"""
from make_variants import SPLIT, between, source

COMMIT = "090fe2e"

TEMPLATE = ("template <typename T, int kVectors>\n"
            "__global__ void __launch_bounds__(kSplitThreads)\n"
            "    ChunkSumsKernel(")


def blocks(commit):
    """(loads and sum, launch) of ChunkSumsKernel as at `commit`."""
    text = source(commit, SPLIT)
    after_check = "std::to_string(g.rows * split->chunks));\n  }\n"
    launch = between(text, after_check, '  return CheckLaunch("launching the chunk sums kernel");')
    return (between(text, "    P av[kVectors], bv[kVectors], wv[kVectors];\n",
                    "    const float total = TeamSum"),
            launch[len(after_check):])


# As at COMMIT, and as commit 32c3320 adopted `once`.
LOADS_AND_SUM, LAUNCH = blocks(COMMIT)
SQUARES_ONCE, LAUNCH_BY_KIND = blocks("32c3320")
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
