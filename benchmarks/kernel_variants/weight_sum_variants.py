"""The kernel variants of the H200 run in h200_weight_sum.log (make_variants.py weight_sum).

What the weight-gradient sum (SumPartials, launched with programmatic
dependent launch after the backward) costs the backward of rows a block
holds, such as bfloat16 16384 x 1024 (256 partial rows) and the small batch:
- `nosum`: SumPartials is not launched (dw is wrong, on purpose);
- `grid`: the sum inside the backward, after a grid-wide barrier (below).
"""
from make_variants import FAST

COMMIT = "a96b604"

VARIANTS = {
    "base": ("the kernels of a96b604", {}),
    "nosum": ("no weight-gradient sum after the backward of rows a team holds (wrong dw)", {FAST: [
        ("        return SumPartials(stream, partials,\n"
         "                           static_cast<T*>(b.dw.untyped_data()), groups,\n"
         "                           g.row_length);\n",
         "        (void)groups;\n        return ffi::Error::Success();\n")]}),
}

# `grid`: where the GPU holds every block of the backward at once (and the
# teams need no cluster), the backward is a cooperative launch: after the
# blocks have written their partial rows, a grid-wide barrier, then block b
# adds up float4 columns b, b + gridDim.x, ... of the partial rows (each
# thread some rows, then the block's warps in order) and writes dw; no
# SumPartials kernel.
GRID_SUM_DEVICE = r"""
__device__ __forceinline__ float4 WarpSum4(float4 v) {
  return make_float4(WarpSum(v.x), WarpSum(v.y), WarpSum(v.z), WarpSum(v.w));
}

// dw = the column sums of the grid's partial rows (one per block, `columns`
// float4s each), after a grid-wide barrier; block b takes columns b,
// b + gridDim.x, ...; `warp_sums` holds a float4 per warp.
template <typename T>
__device__ void SumPartialsInGrid(const float4* partials, T* __restrict__ dw,
                                  int columns, float4* warp_sums) {
  cooperative_groups::this_grid().sync();
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  for (int c = blockIdx.x; c < columns; c += gridDim.x) {
    float4 sum = make_float4(0, 0, 0, 0);
    for (int p = threadIdx.x; p < static_cast<int>(gridDim.x); p += blockDim.x) {
      AddTo(sum, __ldcg(partials + int64_t{p} * columns + c));
    }
    sum = WarpSum4(sum);
    if (lane == 0) warp_sums[warp] = sum;
    __syncthreads();
    if (warp == 0) {
      float4 total = WarpSum4(lane < warps ? warp_sums[lane] : make_float4(0, 0, 0, 0));
      if (lane == 0) {
        T* out = dw + 4 * int64_t{c};
        out[0] = Storage<T>::From(total.x);
        out[1] = Storage<T>::From(total.y);
        out[2] = Storage<T>::From(total.z);
        out[3] = Storage<T>::From(total.w);
      }
    }
    __syncthreads();
  }
}

"""
GRID_SUM = {FAST: [
    ("// dx = inv * (dy*w - x * inv^2 * mean(dy*w*x));  dweight = sum_rows dy*x*inv.\n",
     GRID_SUM_DEVICE + "// dx = inv * (dy*w - x * inv^2 * mean(dy*w*x));  dweight = sum_rows dy*x*inv.\n"),
    ("                       T* __restrict__ dx, float* __restrict__ partials,\n"
     "                       int64_t rows, int row_vectors, int64_t num_partials,\n"
     "                       int rows_per_partial, Shape shape,\n"
     "                       float inv_row_length) {\n",
     "                       T* __restrict__ dx, float* __restrict__ partials,\n"
     "                       int64_t rows, int row_vectors, int64_t num_partials,\n"
     "                       int rows_per_partial, Shape shape,\n"
     "                       float inv_row_length, T* __restrict__ dw_out, bool sum_in_grid) {\n"),
    ("      StoreBlockPartials<P>(dw, reinterpret_cast<float*>(ring_memory),\n"
     "                            partial, row_vectors, at, shape);\n"
     "      return;\n"
     "    }\n"
     "  }\n",
     "      StoreBlockPartials<P>(dw, reinterpret_cast<float*>(ring_memory),\n"
     "                            partial, row_vectors, at, shape);\n"
     "    } else {\n"
     "      StorePartials(dw, partial, row_vectors, at);\n"
     "    }\n"
     "    if (sum_in_grid) {\n"
     "      __syncthreads();  // the teams' sums in the rings' memory are read\n"
     "      SumPartialsInGrid(reinterpret_cast<const float4*>(partials), dw_out,\n"
     "                        row_vectors * P::kSize / 4, reinterpret_cast<float4*>(ring_memory));\n"
     "    }\n"
     "    return;\n"
     "  }\n"),
    ("                  groups = CeilDiv(num_partials, shape.teams);\n"
     "                  return DispatchClustered(shape, [&](auto clustered) {\n",
     "                  groups = CeilDiv(num_partials, shape.teams);\n"
     "                  if (shape.cluster == 1) {\n"
     "                    const auto kernel = FastBackwardKernel<T, decltype(vectors)::value, false>;\n"
     "                    const int ring_bytes = RingBytes(shape, 2);\n"
     "                    const int64_t resident = ResidentGroups(kernel, shape, ring_bytes);\n"
     "                    if (resident >= groups) {\n"
     "                      summed_in_grid = true;\n"
     "                      cudaLaunchAttribute none[1];\n"
     "                      cudaLaunchConfig_t config = LaunchConfig(shape, groups, ring_bytes, stream, none);\n"
     "                      cudaLaunchAttribute cooperative[1];\n"
     "                      cooperative[0].id = cudaLaunchAttributeCooperative;\n"
     "                      cooperative[0].val.cooperative = 1;\n"
     "                      config.attrs = cooperative;\n"
     "                      config.numAttrs = 1;\n"
     "                      return std::optional<ffi::Error>(CudaStatus(cudaLaunchKernelEx(&config, kernel,\n"
     "                          static_cast<const T*>(b.dy.untyped_data()),\n"
     "                          static_cast<const float*>(b.inv_rms.untyped_data()),\n"
     "                          static_cast<const T*>(b.x.untyped_data()),\n"
     "                          static_cast<const T*>(b.w.untyped_data()),\n"
     "                          static_cast<T*>(b.dx.untyped_data()), partials,\n"
     "                          g.rows, row_vectors, num_partials,\n"
     "                          static_cast<int>(rows_per_partial), shape,\n"
     "                          Reciprocal(g.row_length), static_cast<T*>(b.dw.untyped_data()), true),\n"
     "                          \"launching the backward kernel\"));\n"
     "                    }\n"
     "                  }\n"
     "                  return DispatchClustered(shape, [&](auto clustered) {\n"),
    ("                        static_cast<int>(rows_per_partial), shape,\n"
     "                        Reciprocal(g.row_length));\n",
     "                        static_cast<int>(rows_per_partial), shape,\n"
     "                        Reciprocal(g.row_length), static_cast<T*>(b.dw.untyped_data()), false);\n"),
    ("  int64_t groups = 0;  // blocks or clusters, each writing one partial row\n",
     "  int64_t groups = 0;  // blocks or clusters, each writing one partial row\n"
     "  bool summed_in_grid = false;\n"),
    ("        if (!launched || launched->failure()) return launched;\n",
     "        if (!launched || launched->failure() || summed_in_grid) return launched;\n"),
]}

VARIANTS["grid"] = ("backward of a grid the GPU holds: cooperative launch, dw summed after a grid barrier",
                    GRID_SUM)

# `grid2`: `grid` with the columns of a block added up at once: block b
# takes columns b * n ... b * n + n - 1 (n = columns / blocks, rounded up),
# each by `lanes` neighbouring threads (the largest power of two with
# n * lanes <= blockDim.x), lane l adding up partial rows l, l + lanes, ...;
# the lanes of a column then add up by warp shuffles, and, past 32 lanes,
# through shared memory in warp order. One round of loads for any grid.
GRID2_DEVICE = r"""
__device__ __forceinline__ float4 WarpSum4(float4 v) {
  return make_float4(WarpSum(v.x), WarpSum(v.y), WarpSum(v.z), WarpSum(v.w));
}

// Sum over the lanes of v, lanes a power of two up to 32 (neighbouring
// threads of a warp), in every one of them.
__device__ __forceinline__ float4 LaneSum4(float4 v, int lanes) {
  for (int offset = lanes / 2; offset > 0; offset /= 2) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, offset);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, offset);
    v.z += __shfl_xor_sync(0xffffffffu, v.z, offset);
    v.w += __shfl_xor_sync(0xffffffffu, v.w, offset);
  }
  return v;
}

template <typename T>
__device__ void SumPartialsInGrid(const float4* partials, T* __restrict__ dw,
                                  int columns, float4* warp_sums) {
  cooperative_groups::this_grid().sync();
  const int per_block = (columns + gridDim.x - 1) / gridDim.x;
  int lanes = 1;
  while (2 * lanes * per_block <= static_cast<int>(blockDim.x)) lanes *= 2;
  const int lane = threadIdx.x % lanes;
  const int c = blockIdx.x * per_block + threadIdx.x / lanes;
  const bool mine = static_cast<int>(threadIdx.x) < per_block * lanes && c < columns;
  float4 sum = make_float4(0, 0, 0, 0);
  if (mine) {
#pragma unroll 4
    for (int p = lane; p < static_cast<int>(gridDim.x); p += lanes) {
      AddTo(sum, __ldcg(partials + int64_t{p} * columns + c));
    }
  }
  sum = LaneSum4(sum, lanes < kWarpSize ? lanes : kWarpSize);
  if (lanes > kWarpSize) {  // a column's lanes span lanes / 32 warps
    const int warp = threadIdx.x / kWarpSize;
    if (threadIdx.x % kWarpSize == 0) warp_sums[warp] = sum;
    __syncthreads();
    if (lane != 0) return;
    const int warps = lanes / kWarpSize;
    sum = make_float4(0, 0, 0, 0);
    for (int k = 0; k < warps; ++k) AddTo(sum, warp_sums[warp + k]);
  }
  if (!mine || lane != 0) return;
  T* out = dw + 4 * int64_t{c};
  out[0] = Storage<T>::From(sum.x);
  out[1] = Storage<T>::From(sum.y);
  out[2] = Storage<T>::From(sum.z);
  out[3] = Storage<T>::From(sum.w);
}

"""
GRID2 = {FAST: [(old, new.replace(GRID_SUM_DEVICE, GRID2_DEVICE)) for old, new in GRID_SUM[FAST]]}
VARIANTS["grid2"] = ("grid, a block's columns added up at once (one round of loads)", GRID2)
