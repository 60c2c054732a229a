"""The kernel variants of the run in h100_row_blocks.log (make_variants.py row_blocks).

The bfloat16 forward of rows of 16,384 reaches 93% of the copy bandwidth
on an H100 and on an H200, where rows of 8,192 reach 98%. Its blocks of 1024
threads take up to 64 registers each, so an SM holds one block, and the
block's loads pause at its barrier (PrefetchForwardKernel loads the next
row before it to make up for that). float32 rows of 16,384 (one 1024-thread
block per row as well, FastForwardKernel) reach 100% on the H100.
RowForwardKernel (below) normalises one row per block, holds only x in
registers and loads each weight vector just before the store that needs it:
ptxas fits it in 32 registers without a spill (nvcc 13.0, sm_90; float32 of
4 vectors, 16-bit of 1 or 2), so an SM holds two blocks of 1024 threads and
one block's loads run while the other waits at its barrier.
- `rowbig`: RowForwardKernel for blocks of more than 512 threads (rows of
  16,384 in every dtype);
- `rowall`: RowForwardKernel for every row a block holds.
"""
from make_variants import FAST

COMMIT = "c5fab36"

ROW_FORWARD_KERNEL = r"""// One row per block, for an SM to hold two blocks of 1024 threads: each
// thread keeps only its vectors of x in registers and loads each vector of
// the weight just before the store that needs it (at most 32 registers).
template <typename T, int kVectors>
__global__ void __launch_bounds__(kMaxThreads, 2)
    RowForwardKernel(const T* __restrict__ x, const T* __restrict__ w,
                     T* __restrict__ y, float* __restrict__ inv_rms,
                     int row_vectors, float row_length, float eps) {
  using P = Pack<T>;
  __shared__ float warp_sums[kMaxThreads / kWarpSize];
  const Place at{0, 0, static_cast<int>(threadIdx.x),
                 static_cast<int>(blockDim.x)};
  const int64_t row = blockIdx.x;
  P xv[kVectors];
  LoadVectors(reinterpret_cast<const P*>(x) + row * row_vectors, row_vectors,
              at, xv);
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const float sum_squares = WarpSum(SumSquares(xv));
  if (lane == 0) warp_sums[warp] = sum_squares;
  __syncthreads();
  const int warps = blockDim.x / kWarpSize;
  const float total = WarpSum(lane < warps ? warp_sums[lane] : 0.0f);
  const float inv = rsqrtf(total / row_length + eps);
  const P* wp = reinterpret_cast<const P*>(w);
  P* yp = reinterpret_cast<P*>(y) + row * row_vectors;
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    const int c = at.first + k * at.stride;
    if (c < row_vectors) {
      const P wk = wp[c];
      P out;
#pragma unroll
      for (int e = 0; e < P::kSize; ++e) {
        out.v[e] = Storage<T>::From(ToAcc<float>(wk.v[e]) *
                                    (inv * ToAcc<float>(xv[k].v[e])));
      }
      yp[c] = out;
    }
  }
  if (threadIdx.x == 0) inv_rms[row] = inv;
}

"""

KERNEL_PLACE = "// The forward for rows spread over a cluster of blocks (rows too long for\n"
DISPATCH_PLACE = "              if constexpr (kRows > 1) {\n"


def row_forward(condition):
    """RowForwardKernel for the rows a block holds where `condition` holds."""
    launch = (
        f"              if (shape.cluster == 1 && {condition} && g.rows <= kMaxGrid) {{\n"
        "                RowForwardKernel<T, kVectors>\n"
        "                    <<<static_cast<unsigned>(g.rows), shape.team, 0, stream>>>(\n"
        "                        x, w, y, inv_rms, row_vectors, row_length, epsilon);\n"
        "                return CheckLaunch(\"launching the forward kernel\");\n"
        "              }\n")
    return {FAST: [(KERNEL_PLACE, ROW_FORWARD_KERNEL + KERNEL_PLACE),
                   (DISPATCH_PLACE, launch + DISPATCH_PLACE)]}


VARIANTS = {
    "base": ("the kernels of c5fab36", {}),
    "rowbig": ("RowForwardKernel (two 1024-thread blocks per SM) for blocks of more than 512 threads",
               row_forward("shape.team > kMaxThreads / 2")),
    "rowall": ("RowForwardKernel for every row a block holds", row_forward("true")),
}
