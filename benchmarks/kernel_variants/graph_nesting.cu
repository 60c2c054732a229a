// What it costs that XLA records each FFI custom call into its command
// buffer (a CUDA graph) as a nested graph of its own. The same chain of 20
// ops, each op one or two calls of gpu_ops' launch code (TryFastForward,
// TryFastBackward), runs three ways:
//   stream  the calls launched back to back on a stream;
//   flat    the whole chain captured into one graph (every kernel a node of it);
//   nested  each call captured into a graph of its own, added to the chain's
//           graph as a child-graph node after the one before (what XLA's
//           command buffers do with a custom call).
// An empty kernel, one per op, shows the cost of a node alone. CUDA events,
// median of 21 runs of 20 chains (event_timing.cuh); microseconds per op.
//   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -I../../gpu_ops/csrc \
//     -I$(python3 -c 'import jax.ffi; print(jax.ffi.include_dir())') graph_nesting.cu
#include "rms_norm_fast.cu"
#include "cuda_scratch.h"
#include "bench_buffers.cuh"
#include "event_timing.cuh"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

using namespace gpu_ops;
using Call = std::function<void(cudaStream_t)>;
constexpr int kChain = 20;

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) { printf("%s: %s\n", what, cudaGetErrorString(e)); exit(1); }
}

cudaGraphExec_t Instantiate(cudaGraph_t graph) {
  cudaGraphExec_t exec;
  Check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  cudaGraphDestroy(graph);
  return exec;
}

cudaGraph_t Capture(cudaStream_t s, const std::function<void()>& record) {
  cudaGraph_t graph;
  Check(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "begin capture");
  record();
  Check(cudaStreamEndCapture(s, &graph), "end capture");
  return graph;
}

cudaGraphExec_t FlatChain(cudaStream_t s, const std::vector<Call>& op) {
  return Instantiate(Capture(s, [&] {
    for (int i = 0; i < kChain; ++i) for (const Call& call : op) call(s);
  }));
}

cudaGraphExec_t NestedChain(cudaStream_t s, const std::vector<Call>& op) {
  cudaGraph_t parent;
  cudaGraphCreate(&parent, 0);
  cudaGraphNode_t last = nullptr;
  for (int i = 0; i < kChain; ++i) {
    for (const Call& call : op) {
      cudaGraph_t child = Capture(s, [&] { call(s); });
      cudaGraphNode_t node;
      Check(cudaGraphAddChildGraphNode(&node, parent, last ? &last : nullptr, last ? 1 : 0, child),
            "child node");  // the node holds a copy of child
      cudaGraphDestroy(child);
      last = node;
    }
  }
  return Instantiate(parent);
}

void Report(const char* name, cudaStream_t s, const std::vector<Call>& op) {
  const double stream = TimeUs([&] { for (int i = 0; i < kChain; ++i) for (const Call& c : op) c(s); });
  cudaGraphExec_t flat = FlatChain(s, op), nested = NestedChain(s, op);
  const double flat_us = TimeUs([&] { cudaGraphLaunch(flat, s); });
  const double nested_us = TimeUs([&] { cudaGraphLaunch(nested, s); });
  Check(cudaDeviceSynchronize(), name);
  printf("%-26s stream %7.2f us  flat %7.2f us  nested %7.2f us  (nested - flat %+.2f us per op)\n", name,
         stream / kChain, flat_us / kChain, nested_us / kChain, (nested_us - flat_us) / kChain);
  cudaGraphExecDestroy(flat);
  cudaGraphExecDestroy(nested);
}

__global__ void Empty() {}

void Expect(std::optional<ffi::Error> launched, const char* what) {
  if (!launched || launched->failure()) { printf("%s: not launched\n", what); exit(1); }
}

int main() {
  cudaStream_t s;
  cudaStreamCreate(&s);
  Report("empty kernel", s, {[](cudaStream_t st) { Empty<<<1, 32, 0, st>>>(); }});
  for (auto [rows, len] : {std::pair<int64_t, int64_t>{512, 4096}, {16384, 1024}}) {
    const int64_t n = rows * len, np = DweightPartialRows(rows, len);
    void *x, *w, *y, *dy, *dx, *dw, *inv, *part, *chunks;
    for (void** p : {&x, &y, &dy, &dx}) cudaMalloc(p, n * 2);
    cudaMalloc(&w, len * 2); cudaMalloc(&dw, len * 2); cudaMalloc(&inv, rows * 4);
    cudaMalloc(&part, np * len * 4); cudaMalloc(&chunks, 4);
    Fill<<<1024, 256>>>((uint16_t*)x, n, 1, true);
    Fill<<<1024, 256>>>((uint16_t*)dy, n, 2, true);
    Fill<<<64, 256>>>((uint16_t*)w, len, 3, true);
    const auto bf16 = XLA_FFI_DataType_BF16, f32 = XLA_FFI_DataType_F32;
    Buf bx(bf16, x, {rows, len}), bw(bf16, w, {len}), by(bf16, y, {rows, len}), binv(f32, inv, {rows});
    Buf bdy(bf16, dy, {rows, len}), bdx(bf16, dx, {rows, len}), bdw(bf16, dw, {len});
    Buf bpart(f32, part, {np, len}), bchunks(f32, chunks, {1});
    ForwardBuffers fb{bx.any(), bw.any(), by.any(), binv.any(), bchunks.any()};
    BackwardBuffers bb{bdy.any(), binv.any(), bx.any(), bw.any(), bdx.any(), bdw.any(), bpart.any(), bchunks.any()};
    const RowGeometry g{rows, len};
    const Call fwd = [&](cudaStream_t st) { Expect(TryFastForward(st, fb, g, 1e-5), "forward"); };
    const Call bwd = [&](cudaStream_t st) { Expect(TryFastBackward(st, bb, g), "backward"); };
    char name[64];
    snprintf(name, sizeof(name), "bf16 %ld x %ld fwd", (long)rows, (long)len);
    Report(name, s, {fwd});
    snprintf(name, sizeof(name), "bf16 %ld x %ld fwd+bwd", (long)rows, (long)len);
    Report(name, s, {fwd, bwd});
    for (void* p : {x, w, y, dy, dx, dw, inv, part, chunks}) cudaFree(p);
  }
}
