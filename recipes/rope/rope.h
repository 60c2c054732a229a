// Rotary position embedding with its table of frequencies made once per
// executable: the state recipe. What both platforms share is here: the
// state, the instantiate handler that makes it, and the checks of a call.
// Each library (CPU or CUDA) includes this header from one source file, so
// the definitions below exist once in each.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

// Internal linkage (the unnamed namespace) gives each library, CPU and CUDA,
// objects of its own. An inline variable or static member outside it is one
// object in the whole process (a "unique" symbol, which the dynamic linker
// shares between libraries however they are loaded): the CUDA library's type
// id would be the CPU library's, which XLA's GPU registry already uses for
// a type of its own, and a GPU call crashes.
namespace {

// The table travels to a GPU kernel by value, as a kernel argument, so it
// has a fixed size: heads of up to 256 values.
constexpr int64_t kMaxPairs = 128;

struct Frequencies {
  float inverse[kMaxPairs];
};

// The state: XLA keeps one per executable (made by RopeInstantiate when the
// executable is loaded) and hands it to every call. XLA knows the type by
// `id`, which registering the type fills in.
struct RopeTable {
  static inline ffi::TypeId id = {};
  int64_t head_dim;
  Frequencies frequencies;
};

// How many tables this library has made, for the test that each executable
// makes one and its calls none.
inline std::atomic<int64_t> tables_made{0};

// The instantiate stage sees the attributes, not the buffers: the table
// depends on head_dim and base only.
inline ffi::ErrorOr<std::unique_ptr<RopeTable>> MakeRopeTable(int64_t head_dim, double base) {
  if (head_dim < 2 || head_dim % 2 != 0 || head_dim / 2 > kMaxPairs) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        "rope: head_dim must be even, from 2 to 256, got " + std::to_string(head_dim)));
  }
  if (!(base > 1.0)) {
    return ffi::Unexpected(ffi::Error::InvalidArgument("rope: base must be more than 1"));
  }
  auto table = std::make_unique<RopeTable>();
  table->head_dim = head_dim;
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    table->frequencies.inverse[i] =
        static_cast<float>(std::pow(base, -2.0 * static_cast<double>(i) / head_dim));
  }
  tables_made.fetch_add(1);
  return std::move(table);  // nvcc does not move into ErrorOr by itself
}

// A call's buffers against its table: x is (tokens, heads, head_dim),
// positions (tokens,), y like x. Gives the number of rows, tokens * heads.
inline ffi::ErrorOr<int64_t> RopeRows(const RopeTable& table, ffi::Span<const int64_t> x_dims,
                                      int64_t positions, int64_t y_size) {
  if (x_dims.size() != 3 || x_dims[2] != table.head_dim || x_dims[0] != positions) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        "rope: x must be (tokens, heads, head_dim) with one position per token and "
        "the head_dim the table was made for"));
  }
  const int64_t size = x_dims[0] * x_dims[1] * x_dims[2];
  if (y_size != size) {
    return ffi::Unexpected(ffi::Error::InvalidArgument("rope: y must have x's shape"));
  }
  return x_dims[0] * x_dims[1];
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(RopeInstantiate, MakeRopeTable,
                              ffi::Ffi::BindInstantiate()
                                  .Attr<int64_t>("head_dim")
                                  .Attr<double>("base"));

// What Python needs to register the type: its id, and how to delete a table.
extern "C" ffi::TypeId* RopeTableTypeId() { return &RopeTable::id; }
extern "C" const XLA_FFI_TypeInfo* RopeTableTypeInfo() {
  static const XLA_FFI_TypeInfo info = ffi::MakeTypeInfo<RopeTable>();
  return &info;
}
extern "C" int64_t RopeTablesMade() { return tables_made.load(); }
