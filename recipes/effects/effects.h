// An operation whose purpose is a side effect, the side-effect recipe: each
// call appends its tag to a log that Python reads, and returns the tag, for
// a later call to take as its `after` operand and so run after it. What both platforms
// share is here; each library includes it from one source file.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

// One log per library: see rope/rope.h for why it is in an unnamed namespace.
namespace {

inline std::mutex log_mutex;
inline std::vector<int32_t> event_log;

// Handlers run on the host when XLA reaches their call (on a GPU, when the
// call's work is enqueued), so the log holds the calls in the order XLA ran them.
inline void LogEvent(int32_t tag) {
  std::lock_guard<std::mutex> lock(log_mutex);
  event_log.push_back(tag);
}

}  // namespace

extern "C" int64_t EventCount() {
  std::lock_guard<std::mutex> lock(log_mutex);
  return static_cast<int64_t>(event_log.size());
}
extern "C" int64_t EventAt(int64_t i) {
  std::lock_guard<std::mutex> lock(log_mutex);
  return event_log.at(i);
}
extern "C" void ClearEvents() {
  std::lock_guard<std::mutex> lock(log_mutex);
  event_log.clear();
}
