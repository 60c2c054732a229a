"""The kernel variants of the H200 run in h200_grid_forward.log (make_variants.py grid_forward_h200).

Commit 9e9c7ee adopted the grid forward (h100_grid_forward.log). Its benchmark
runs on both GPUs (../results/) put the H200's bfloat16 seed shape slower than
the run before it, but on another machine (forward 11.67 to 12.20 µs, forward
+ backward 31.17 to 31.93 µs). This set times the two on one H200:
- `nogridfwd`: the forward handler without the grid forward, so that the seed
  shape's bfloat16 forward takes the shared-row forward and its float32
  forward the split-row kernels, as before 9e9c7ee (the grid backward as at
  9e9c7ee);
- `head`: the kernels of 9e9c7ee as they are.
"""
COMMIT = "9e9c7ee"

NO_GRID_FORWARD = [
    ("    if (auto launched = TryGridForward(stream, buffers, g, eps)) {\n"
     "      return *launched;\n"
     "    }\n", ""),
]

VARIANTS = {
    "nogridfwd": ("the forward handler without the grid forward", {"rms_norm_cuda.cu": NO_GRID_FORWARD}),
    "head": ("the kernels of 9e9c7ee", {}),
}
