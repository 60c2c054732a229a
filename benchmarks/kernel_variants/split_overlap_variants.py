"""The kernel variants of the run in h200_split_overlap.log (make_variants.py split_overlap), at the JAX level (run_jax_level.sh).

The float32 forward of the seed's shape (32 rows of 262,144) is the one case
where gpu_ops' forward is clearly behind XLA's fusion: 23.8 against 19.8 µs
on an H200 (benchmarks/results/nvidia-h200.json). It takes the split-row
kernels: ChunkSumsKernel (pass 1, the chunks last to first) adds up each
chunk's squares, and ChunkForwardKernel (pass 2), launched with
programmatic dependent launch, loads its vectors while pass 1 still runs,
then waits for the chunk sums. Under the profiler (../results/earlier_runs/nvidia-h200_timeline_c66f2b7.log)
pass 1 took 9.5 µs and pass 2 15.6 µs, where XLA's reduction over the same
32 MB took 5.4 µs and its normalising kernel 11.5 µs: XLA's passes read x
from L2 (x is what the op before just wrote), at more than the memory's
bandwidth. Pass 2's early loads may compete with pass 1 for it:
- `nopdl`: pass 2 starts only once pass 1 is done (pass 1 no longer lets
  it start early; it still waits at griddepcontrol.wait, which then
  returns at once), in the forward and in the backward;
- `nopdl_fwd`: `nopdl` with pass 1 taking the chunks first to last, as
  XLA's reduction does.
Timed at the JAX level (rms_norm_bench.py, kernel_timeline.py), where each
op reads what the one before wrote.
"""
from make_variants import SPLIT

COMMIT = "a4369b5"

EARLY_START = "  StartNextKernel();  // pass 2 loads its vectors while this pass finishes\n"
REVERSED = "    const int64_t item = rows * chunks - 1 - step;  // last to first\n"

VARIANTS = {
    "base": ("the kernels of a4369b5 (those of 5926f00)", {}),
    "nopdl": ("pass 2 of the split rows starts once pass 1 is done", {SPLIT: [(EARLY_START, "")]}),
    "nopdl_fwd": ("nopdl, and pass 1 takes the chunks first to last",
                  {SPLIT: [(EARLY_START, ""), (REVERSED, "    const int64_t item = step;\n")]}),
}
