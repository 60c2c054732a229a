// Scratch microbenchmark: times the fast kernels of one variant of
// rms_norm_fast.cu (TryFast*, else the grid kernels, rms_norm_grid_rows.cu
// or before it rms_norm_grid_backward.cu, unless BENCH_NO_GRID is set and,
// in the forward, rms_norm_shared_rows.cu's unless BENCH_NO_SHARED is set,
// else rms_norm_split_rows.cu's TrySplitRows*)
// with CUDA events. BENCH_CHECK=1: first compares y, dx and dw of cases of
// at most 2^24 values with a float64 reference computed on the host.
#include "rms_norm_fast.cu"
#include "rms_norm_split_rows.cu"
#if __has_include("rms_norm_shared_rows.cu")  // sources of commit d2b6047 on
#include "rms_norm_shared_rows.cu"
#define BENCH_SHARED_ROWS 1
#else
#define BENCH_SHARED_ROWS 0
#endif
#if __has_include("rms_norm_grid_rows.cu")  // sources of commit 9e9c7ee on
#include "rms_norm_grid_rows.cu"
#define BENCH_GRID_BACKWARD 1
#define BENCH_GRID_FORWARD 1
#elif __has_include("rms_norm_grid_backward.cu")  // sources of commit fb9bfb8 on
#include "rms_norm_grid_backward.cu"
#define BENCH_GRID_BACKWARD 1
#define BENCH_GRID_FORWARD 0
#else
#define BENCH_GRID_BACKWARD 0
#define BENCH_GRID_FORWARD 0
#endif
#include "cuda_scratch.h"
#include "bench_buffers.cuh"
#include "event_timing.cuh"
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <chrono>
#include <cmath>
using namespace gpu_ops;

// Host time per call of f while the GPU keeps up (f only queues work).
double HostUs(std::function<void()> f) {
  cudaDeviceSynchronize();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) f();
  auto stop = std::chrono::steady_clock::now();
  cudaDeviceSynchronize();
  return std::chrono::duration<double, std::micro>(stop - start).count() / 50;
}

__global__ void Empty() {}

int main(int argc, char** argv) {
  const char* label = argc > 1 ? argv[1] : "?";
  size_t copy_bytes = size_t{1} << 30;
  void *ca, *cb; cudaMalloc(&ca, copy_bytes); cudaMalloc(&cb, copy_bytes);
  double copy_us = TimeUs([&] { cudaMemcpyAsync(cb, ca, copy_bytes, cudaMemcpyDeviceToDevice); });
  double copy_gbps = 2.0 * copy_bytes / copy_us / 1e3;
  cudaFree(ca); cudaFree(cb);
  printf("%s copy %.0f GB/s; host time to launch an empty kernel %.2f us\n", label, copy_gbps, HostUs([] { Empty<<<1, 32>>>(); }));
  struct Case { bool bf16; int64_t rows, len; };
  std::vector<Case> cases;
  for (bool bf : {true, false}) for (int64_t r : {16384, 32768}) for (int64_t l : {1024, 4096, 8192, 16384}) cases.push_back({bf, r, l});
  cases.push_back({true, 32, 262144}); cases.push_back({false, 32, 262144});
  cases.push_back({true, 512, 4096}); cases.push_back({false, 512, 4096});
  if (argc > 4) cases = {{std::string(argv[2]) == "bf16", atol(argv[3]), atol(argv[4])}};  // one case: bf16|f32 ROWS LEN
  for (auto c : cases) {
    const int item = c.bf16 ? 2 : 4;
    const XLA_FFI_DataType t = c.bf16 ? XLA_FFI_DataType_BF16 : XLA_FFI_DataType_F32;
    const int64_t n = c.rows * c.len;
    void *x, *w, *y, *dy, *dx, *dw, *inv, *part, *chunks;
    const int64_t np = DweightPartialRows(c.rows, c.len), nc = ChunkSumsLength(c.rows, c.len);
    cudaMalloc(&x, n * item); cudaMalloc(&y, n * item); cudaMalloc(&dy, n * item); cudaMalloc(&dx, n * item);
    cudaMalloc(&w, c.len * item); cudaMalloc(&dw, c.len * item); cudaMalloc(&inv, c.rows * 4); cudaMalloc(&part, np * c.len * 4); cudaMalloc(&chunks, std::max<int64_t>(nc, 1) * 4);
    if (c.bf16) { Fill<<<1024, 256>>>((uint16_t*)x, n, 1, true); Fill<<<1024, 256>>>((uint16_t*)dy, n, 2, true); Fill<<<64, 256>>>((uint16_t*)w, c.len, 3, true); }
    else { FillF<<<1024, 256>>>((float*)x, n, 1); FillF<<<1024, 256>>>((float*)dy, n, 2); FillF<<<64, 256>>>((float*)w, c.len, 3); }
    Buf bx(t, x, {c.rows, c.len}), bw(t, w, {c.len}), by(t, y, {c.rows, c.len}), binv(XLA_FFI_DataType_F32, inv, {c.rows});
    Buf bdy(t, dy, {c.rows, c.len}), bdx(t, dx, {c.rows, c.len}), bdw(t, dw, {c.len}), bpart(XLA_FFI_DataType_F32, part, {np, c.len});
    Buf bchunks(XLA_FFI_DataType_F32, chunks, {nc});
    ForwardBuffers fb{bx.any(), bw.any(), by.any(), binv.any(), bchunks.any()};
    BackwardBuffers bb{bdy.any(), binv.any(), bx.any(), bw.any(), bdx.any(), bdw.any(), bpart.any(), bchunks.any()};
    RowGeometry g{c.rows, c.len};
    bool fast_f = true, fast_b = true, split_f = false, split_b = false, shared_f = false, grid_f = false, grid_b = false;
    // BENCH_ONLY=fwd or bwd times one direction only (for profiling).
    const char* only = getenv("BENCH_ONLY");
    const bool do_f = !only || std::string(only) == "fwd", do_b = !only || std::string(only) == "bwd";
    // One call of each direction: the fast kernels, else the split-row ones.
    auto fwd = [&] { auto r = TryFastForward(0, fb, g, 1e-5);
#if BENCH_GRID_FORWARD
    if (!r && !getenv("BENCH_NO_GRID")) { r = TryGridForward(0, fb, g, 1e-5); grid_f = r.has_value(); }
#endif
    if (!r && !getenv("BENCH_NO_SHARED")) {
#if BENCH_SHARED_ROWS
      r = TrySharedRowForward(0, fb, g, 1e-5); shared_f = r.has_value();
#endif
    } if (!r) { r = TrySplitRowsForward(0, fb, g, 1e-5); split_f = r.has_value(); } if (!r) fast_f = false; else if (r->failure()) { printf("fwd error\n"); exit(1); } };
    auto bwd = [&] { auto r = TryFastBackward(0, bb, g); if (!r && !getenv("BENCH_NO_GRID")) {
#if BENCH_GRID_BACKWARD
      r = TryGridBackward(0, bb, g); grid_b = r.has_value();
#endif
    } if (!r) { r = TrySplitRowsBackward(0, bb, g); split_b = r.has_value(); } if (!r) fast_b = false; else if (r->failure()) { printf("bwd error\n"); exit(1); } };
    double fus = do_f ? TimeUs(fwd) : 0;
    double bus = do_b ? TimeUs(bwd) : 0;
    const double fhost = do_f ? HostUs(fwd) : 0, bhost = do_b ? HostUs(bwd) : 0;
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { printf("CUDA error %s\n", cudaGetErrorString(e)); exit(1); }
    if (n <= (int64_t{1} << 24) && getenv("BENCH_CHECK")) {  // host reference check
      auto get = [&](void* p, int64_t count) { std::vector<float> out(count); if (c.bf16) { std::vector<uint16_t> h(count); cudaMemcpy(h.data(), p, count * 2, cudaMemcpyDeviceToHost); for (int64_t i = 0; i < count; ++i) { uint32_t u = uint32_t{h[i]} << 16; memcpy(&out[i], &u, 4); } } else cudaMemcpy(out.data(), p, count * 4, cudaMemcpyDeviceToHost); return out; };
      fwd(); bwd(); cudaDeviceSynchronize();
      auto hx = get(x, n), hw = get(w, c.len), hy = get(y, n), hdy = get(dy, n), hdx = get(dx, n), hdw = get(dw, c.len);
      std::vector<double> dwr(c.len, 0.0); double ey = 0, edx = 0, edw = 0, sy = 0, sdx = 0, sdw = 0;
      for (int64_t r = 0; r < c.rows; ++r) {
        double ss = 0, dot = 0; const float* xr = &hx[r * c.len]; const float* dyr = &hdy[r * c.len];
        for (int64_t i = 0; i < c.len; ++i) { ss += double(xr[i]) * xr[i]; dot += double(dyr[i]) * hw[i] * xr[i]; }
        const double inv = 1.0 / sqrt(ss / c.len + 1e-5), corr = inv * inv * dot / c.len;
        for (int64_t i = 0; i < c.len; ++i) {
          const double yr = hw[i] * inv * xr[i], dxr = inv * (dyr[i] * hw[i] - xr[i] * corr);
          ey = std::max(ey, fabs(yr - hy[r * c.len + i])); sy = std::max(sy, fabs(yr));
          edx = std::max(edx, fabs(dxr - hdx[r * c.len + i])); sdx = std::max(sdx, fabs(dxr));
          dwr[i] += dyr[i] * xr[i] * inv;
        }
      }
      for (int64_t i = 0; i < c.len; ++i) { edw = std::max(edw, fabs(dwr[i] - hdw[i])); sdw = std::max(sdw, fabs(dwr[i])); }
      printf("    check: max error / max value: y %.2e dx %.2e dw %.2e\n", ey / sy, edx / sdx, edw / sdw);
    }
    double fbytes = 2.0 * n * item, bbytes = 3.0 * n * item;
    printf("%s %s %6ld x %-7ld fwd %8.1f us %6.0f GB/s %3.0f%%%s | bwd %8.1f us %6.0f GB/s %3.0f%%%s\n", label, c.bf16 ? "bf16" : "f32 ",
           (long)c.rows, (long)c.len, fus, fbytes / fus / 1e3, 100 * fbytes / fus / 1e3 / copy_gbps, fast_f ? (split_f ? " (split)" : shared_f ? " (shared)" : grid_f ? " (grid)" : "") : " (fallback)",
           bus, bbytes / bus / 1e3, 100 * bbytes / bus / 1e3 / copy_gbps, fast_b ? (split_b ? " (split)" : grid_b ? " (grid)" : "") : " (fallback)");
    printf("    host us per call: fwd %.2f bwd %.2f\n", fhost, bhost);
    fflush(stdout);
    for (void* p : {x, w, y, dy, dx, dw, inv, part, chunks}) cudaFree(p);
  }
}
