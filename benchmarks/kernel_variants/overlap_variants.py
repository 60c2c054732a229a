"""The kernel variants of the H200 run in h200_overlap.log (make_variants.py overlap).

Each is a copy of gpu_ops/csrc with one change, aimed at the bfloat16 cases
that missed their targets: the forward of rows of 16,384 (one 1024-thread
block per SM, so nothing overlaps a block's sums and stores) and the backward
of rows of 1,024 and 16,384.

Tried and not run, because ptxas spilled registers in the bfloat16 kernels
(nvcc 13.0, sm_90, 64 registers at 1024 threads): pf1's prefetch with base's
rows per block (2 rows of 2 vectors for rows of 16,384; 56 bytes spilled),
the same with the weight reloaded per group (80 bytes), or with bfloat16
values widened at each use by an opaque shift (104 bytes), and a backward of
up to 2 vectors per thread for 16-bit dtypes (104 bytes).
"""
from make_variants import COMMON, FAST, between, source

COMMIT = "822504d"  # its kernels are those of bae9fe9


OLD_FORWARD = between(source(COMMIT, FAST), "// Block b normalises kRows rows", "// [forward-kernel-end]")

PREFETCH_FORWARD = r"""// Block b normalises groups of kRows rows: group b, b + gridDim.x, ... (a
// grid of as many blocks as run at once). Each thread loads its vectors of a
// group's rows into registers at once (kRows * kVectors loads in flight), and
// loads the next group's before it adds up and writes this one's, so the
// next loads overlap this group's sums and stores even where an SM holds one
// block.
template <typename T, int kVectors, int kRows>
__global__ void __launch_bounds__(kMaxThreads)
    FastForwardKernel(const T* __restrict__ x, const T* __restrict__ w,
                      T* __restrict__ y, float* __restrict__ inv_rms,
                      int64_t rows, int row_vectors, float row_length,
                      float eps) {
  using P = Pack<T>;
  __shared__ float warp_sums[2][kRows][kMaxThreads / kWarpSize];
  const Place at{0, 0, static_cast<int>(threadIdx.x),
                 static_cast<int>(blockDim.x)};
  const P* xp = reinterpret_cast<const P*>(x);
  const int64_t groups = (rows + kRows - 1) / kRows;
  auto load = [&](int64_t group, P (&v)[kRows][kVectors]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      // A group's rows past the end load the last row again (and store nothing).
      const int64_t row = std::min(group * kRows + r, rows - 1);
      LoadVectors(xp + row * row_vectors, row_vectors, at, v[r]);
    }
  };
  int64_t group = blockIdx.x;
  P xv[kRows][kVectors];
  load(group, xv);
  P wv[kVectors];
  LoadVectors(reinterpret_cast<const P*>(w), row_vectors, at, wv);
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  for (int half = 0; group < groups; group += gridDim.x, half ^= 1) {
    P next[kRows][kVectors];
    if (group + gridDim.x < groups) load(group + gridDim.x, next);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float sum_squares = 0;
#pragma unroll
      for (int k = 0; k < kVectors; ++k) {
#pragma unroll
        for (int e = 0; e < P::kSize; ++e) {
          const float v = ToAcc<float>(xv[r][k].v[e]);
          sum_squares += v * v;
        }
      }
      sum_squares = WarpSum(sum_squares);
      if (lane == 0) warp_sums[half][r][warp] = sum_squares;
    }
    // One barrier per group: alternate groups use alternate halves.
    __syncthreads();
    const int64_t first = group * kRows;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float total =
          WarpSum(lane < warps ? warp_sums[half][r][lane] : 0.0f);
      const float inv = rsqrtf(total / row_length + eps);
      if (first + r < rows) {
        StoreNormalised(xv[r], wv, inv,
                        reinterpret_cast<P*>(y) + (first + r) * row_vectors,
                        row_vectors, at);
        if (threadIdx.x == 0) inv_rms[first + r] = inv;
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int k = 0; k < kVectors; ++k) xv[r][k] = next[r][k];
    }
  }
}
"""

OLD_FORWARD_GRID = """              if (shape.cluster == 1 && CeilDiv(g.rows, kRows) <= kMaxGrid) {
                FastForwardKernel<T, kVectors, kRows>
                    <<<static_cast<unsigned>(CeilDiv(g.rows, kRows)),"""
PREFETCH_FORWARD_GRID = """              if (shape.cluster == 1) {
                const auto kernel = FastForwardKernel<T, kVectors, kRows>;
                const int64_t resident =
                    ResidentGroups(kernel, Shape{1, shape.team, 1, kVectors}, 0);
                if (resident < 1) return std::nullopt;
                kernel<<<static_cast<unsigned>(std::min(CeilDiv(g.rows, kRows), resident)),"""

PREFETCH = [(OLD_FORWARD, PREFETCH_FORWARD), (OLD_FORWARD_GRID, PREFETCH_FORWARD_GRID)]
# The weight loaded again for each group (from L1 or L2), just before the
# barrier, rather than held in registers throughout.
WEIGHT_IN_LOOP = PREFETCH_FORWARD.replace(
    "  P wv[kVectors];\n  LoadVectors(reinterpret_cast<const P*>(w), row_vectors, at, wv);\n", "").replace(
    "    // One barrier per group",
    "    P wv[kVectors];\n    LoadVectors(reinterpret_cast<const P*>(w), row_vectors, at, wv);\n"
    "    // One barrier per group")
assert WEIGHT_IN_LOOP.count("LoadVectors(reinterpret_cast<const P*>(w)") == 1
HALF_ROWS = [("constexpr int kRows = std::max(1, kForwardLoads / kVectors);",
              "constexpr int kRows = std::max(1, kForwardLoads / 2 / kVectors);")]

TEAM_BARRIER = [
    ("  if (lane == 0) slots.warps[half][warp] = v;\n  __syncthreads();\n",
     "  if (lane == 0) slots.warps[half][warp] = v;\n"
     "  if (s.teams == 1) {\n    __syncthreads();\n"
     "  } else if (s.team == kWarpSize) {\n    __syncwarp();\n"
     "  } else {  // the team's own barrier (0 is the block's)\n"
     "    asm volatile(\"bar.sync %0, %1;\" ::\"r\"(1 + at.team), \"r\"(s.team) : \"memory\");\n"
     "  }\n"),
]
# name: (what it changes, {file: [(old, new), ...]})
VARIANTS = {
    "base": ("the kernels as committed", {}),
    "pf1": ("forward of rows a block holds: a grid of resident blocks, each loading its next "
            "rows into registers before it adds up and writes its current ones; half the rows per "
            "block of base (kForwardLoads / 2 loads in flight, as many on their way)",
            {FAST: PREFETCH + HALF_ROWS}),
    "pfw1": ("pf1 with the weight loaded again for each group (L1 or L2), not held in registers",
             {FAST: [(OLD_FORWARD, WEIGHT_IN_LOOP), (OLD_FORWARD_GRID, PREFETCH_FORWARD_GRID)] + HALF_ROWS}),
    "nb": ("backward of several teams per block: each team syncs on its own named barrier "
           "(bar.sync id, team), not the block's", {COMMON: TEAM_BARRIER}),
}
