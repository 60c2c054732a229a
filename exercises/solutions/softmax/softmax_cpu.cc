// Row softmax on the CPU: y = exp(x - max) / sum(exp(x - max)) over x's last axis.
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
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = in + r * n;
    // Subtracting the row's largest value keeps exp from overflowing.
    const float largest = *std::max_element(row, row + n);
    double total = 0;
    for (int64_t j = 0; j < n; ++j) total += std::exp(row[j] - largest);
    for (int64_t j = 0; j < n; ++j) {
      out[r * n + j] = static_cast<float>(std::exp(row[j] - largest) / total);
    }
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(SoftmaxCpu, Softmax,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // x
                                  .Ret<ffi::Buffer<ffi::F32>>());  // y
