// The CUDA implementations behind the handlers in rms_norm_cuda.cu.
//
// - The fast kernels, the default. They cover x and weight of one dtype
//   (float16, bfloat16 or float32) with a row length that fills whole
//   16-byte vectors, and return nullopt for anything else:
//   - rms_norm_fast.cu (TryFast*): 16-byte loads and stores, each row held
//     on chip so x is read once, a team of threads (or a cluster of blocks,
//     for long rows) per row, and a one-pass backward; nullopt for rows too
//     long for a team;
//   - rms_norm_grid_rows.cu (TryGridForward, TryGridBackward): those longer
//     rows whose x (and in the backward, dy) the whole GPU holds at once, in
//     one pass with a grid-wide barrier;
//   - rms_norm_shared_rows.cu (TrySharedRowForward): in the forward, the
//     rest of those longer rows that a cluster of blocks holds in shared
//     memory, in one pass; nullopt for longer rows, and on GPUs without
//     clusters;
//   - rms_norm_split_rows.cu (TrySplitRows*): the rest, each row split over
//     many blocks, in two passes.
// - The seed tutorial's kernels (rms_norm_apex_seed.cu), derived from NVIDIA
//   apex: every dtype pair and row length. They run what the fast kernels do
//   not cover, and stay selectable on their own as the comparison baseline.
//
// Buffers have been validated (rms_norm_checks.h) and rows > 0.
#ifndef GPU_OPS_RMS_NORM_CUDA_KERNELS_H_
#define GPU_OPS_RMS_NORM_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <optional>

#include "rms_norm_checks.h"

namespace gpu_ops {

// Scratch buffers: see cuda_scratch.h.
struct ForwardBuffers {
  ffi::AnyBuffer x, w;        // inputs
  ffi::AnyBuffer y, inv_rms;  // results
  ffi::AnyBuffer chunk_sums;  // scratch: float32 (ChunkSumsLength)
};

struct BackwardBuffers {
  ffi::AnyBuffer dy, inv_rms, x, w;  // inputs
  ffi::AnyBuffer dx, dw;             // results
  ffi::AnyBuffer partials;           // scratch: (num_partials, row_length)
  ffi::AnyBuffer chunk_sums;         // scratch: float32 (ChunkSumsLength)
};

ffi::Error ApexSeedForward(cudaStream_t stream, const ForwardBuffers& b,
                           RowGeometry g, double eps);
ffi::Error ApexSeedBackward(cudaStream_t stream, const BackwardBuffers& b,
                            RowGeometry g);

std::optional<ffi::Error> TryFastForward(cudaStream_t stream,
                                         const ForwardBuffers& b,
                                         RowGeometry g, double eps);
std::optional<ffi::Error> TryFastBackward(cudaStream_t stream,
                                          const BackwardBuffers& b,
                                          RowGeometry g);

std::optional<ffi::Error> TrySharedRowForward(cudaStream_t stream,
                                              const ForwardBuffers& b,
                                              RowGeometry g, double eps);

std::optional<ffi::Error> TryGridForward(cudaStream_t stream,
                                         const ForwardBuffers& b,
                                         RowGeometry g, double eps);
std::optional<ffi::Error> TryGridBackward(cudaStream_t stream,
                                          const BackwardBuffers& b,
                                          RowGeometry g);

std::optional<ffi::Error> TrySplitRowsForward(cudaStream_t stream,
                                              const ForwardBuffers& b,
                                              RowGeometry g, double eps);
std::optional<ffi::Error> TrySplitRowsBackward(cudaStream_t stream,
                                               const BackwardBuffers& b,
                                               RowGeometry g);

}  // namespace gpu_ops

#endif  // GPU_OPS_RMS_NORM_CUDA_KERNELS_H_
