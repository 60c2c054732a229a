"""The kernel variants of the H200 run in h200_split_reverse.log (make_variants.py split_reverse).

Under the profiler (the float32 part of ../results/earlier_runs/nvidia-h200_timeline_c66f2b7.log),
the first pass of the float32 seed shape's split-row forward
(ChunkSumsKernel, which reads x) took 9.5 µs where XLA's reduction of the
same x took 5.4 µs: in a chain of ops, x is what the op before just wrote,
and the L2 keeps the last of it. The first pass reads the chunks from the first row's to the last's,
as they were written, so it starts with what the L2 dropped first:
- `rev`: the first pass takes the chunks last to first (forward and
  backward); the second pass then starts with what the first read last.
`split_order`'s `rev` (h200_split_order.log) reversed the backward's
segment order too and was timed with CUDA events only, where each launch
reads the same x rather than the previous launch's y.
Part 1 of the log is the JAX-level benchmark of the seed shape
(rms_norm_bench.py --row-len 262144) with gpu_ops built from `base`, then
from `rev` (its split-row file copied over gpu_ops/csrc); part 2 is
`run_set.sh split_reverse`.
"""
from make_variants import SPLIT

COMMIT = "2ac71a9"

VARIANTS = {
    "base": ("the kernels of 2ac71a9", {}),
    "rev": ("split-row first pass over the chunks last to first", {SPLIT: [
        ("  for (int64_t item = blockIdx.x; item < rows * chunks; item += gridDim.x) {\n"
         "    const int64_t row = item / chunks;\n"
         "    const Place at = ChunkPlace(item % chunks, kVectors);\n",
         "  for (int64_t step = blockIdx.x; step < rows * chunks; step += gridDim.x) {\n"
         "    const int64_t item = rows * chunks - 1 - step;\n"
         "    const int64_t row = item / chunks;\n"
         "    const Place at = ChunkPlace(item % chunks, kVectors);\n"),
    ]}),
}
