// Row softmax on the CPU: y = exp(x - max) / sum(exp(x - max)) over x's last axis.
// Exercise, chapter 1: write the loop over the rows (the solution is in
// exercises/solutions/softmax/).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

static ffi::Error Softmax(ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y) {
  const auto dims = x.dimensions();
  if (dims.size() == 0) return ffi::Error::InvalidArgument("softmax: x must have an axis");
  const int64_t n = dims.back();
  const int64_t rows = n == 0 ? 0 : x.element_count() / n;
  const float* in = x.typed_data();
  float* out = y->typed_data();
  // TODO: for each of the rows (row r starts at in + r * n), its largest
  // value, the sum of exp(value - largest), and out = exp(value - largest) / sum.
  (void)rows, (void)in, (void)out;
  return ffi::Error(ffi::ErrorCode::kUnimplemented, "softmax_cpu.cc: TODO");
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(SoftmaxCpu, Softmax,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // x
                                  .Ret<ffi::Buffer<ffi::F32>>());  // y
