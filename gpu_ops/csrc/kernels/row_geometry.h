// What the kernels know of a call's buffers beyond XLA's types: an input as
// rows, and the float8 layout's group size. The FFI handlers (ffi/) check
// the buffers against these; the kernels take them as checked.
#ifndef GPU_OPS_ROW_GEOMETRY_H_
#define GPU_OPS_ROW_GEOMETRY_H_

#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace gpu_ops {

namespace ffi = xla::ffi;

// An RMS norm input seen as a matrix: `rows` independent rows of `row_length`
// elements each (row_length = number of elements in the weight).
struct RowGeometry {
  int64_t rows;
  int64_t row_length;
};

// Values of a row quantised to float8 share a scale in groups of this many
// (the float8 output's layout, and the float8 input's).
constexpr int64_t kFloat8Group = 128;

}  // namespace gpu_ops

#endif  // GPU_OPS_ROW_GEOMETRY_H_
