// Writing a decoding step's row into a cache in place: the aliasing recipe.
// What both platforms share is here; each library includes it from one
// source file, so the definitions below exist once in each.
#pragma once

#include <atomic>
#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

// One counter per library: see rope/rope.h for why it is in an unnamed namespace.
namespace {

// How many times this library's handler copied a whole cache because its
// output was not its input's buffer, for the tests of aliasing.
inline std::atomic<int64_t> whole_cache_copies{0};

}  // namespace

extern "C" int64_t KvCacheCopies() { return whole_cache_copies.load(); }

// cache is (slots, width), row (width,), slot a scalar, out like cache.
inline ffi::Error CheckWriteRow(ffi::Span<const int64_t> cache_dims, int64_t row_size,
                                int64_t slot_size, int64_t out_size) {
  if (cache_dims.size() != 2 || cache_dims[0] == 0 || row_size != cache_dims[1] ||
      slot_size != 1 || out_size != cache_dims[0] * cache_dims[1]) {
    return ffi::Error::InvalidArgument(
        "write_row: cache must be (slots, width) with slots > 0, row (width,), slot one "
        "int32 and the result cache's shape");
  }
  return ffi::Error::Success();
}

// The row a slot names, as jax.lax.dynamic_update_slice reads its index: a
// negative slot counts from the end, and the result is clamped into the cache.
#ifdef __CUDACC__
__host__ __device__
#endif
inline int64_t ClampSlot(int32_t slot, int64_t slots) {
  const int64_t from_start = slot < 0 ? slot + slots : slot;
  return from_start < 0 ? 0 : (from_start >= slots ? slots - 1 : from_start);
}
