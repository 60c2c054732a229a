// Which CUDA kernel computes an RMS norm, and in what launch shape: one plan
// per direction, decided here and nowhere else.
//
// The planner is plain host code, compiled into every build, with or
// without CUDA: what it needs to know about a GPU comes through the
// DeviceModel interface (whether it runs clusters, and how many blocks of a
// kernel it holds at once). On a GPU the handlers answer those questions
// with CUDA's occupancy calculator (ffi/rms_norm_cuda.cu); elsewhere Python
// can ask for the plan a described GPU would get (described_gpu.h, through
// ffi/module.cc), which is how the tests check every shape class without a
// GPU. The launchers in kernels/ execute a plan and decide nothing.
//
// The paths, in the order the planner tries them:
// forward
//   kShortRows    rows of at most kShortRowValues values (a QK-norm's
//                 head_dim): a group of 8 to 32 lanes of a warp a row, 8
//                 values a lane, so a warp holds several rows
//                 (rms_norm_short_rows.cu);
//   kWideRows     16-bit rows of more than 512 vectors (wider than half a
//                 block), at least as many as SMs: a row a 1024-thread
//                 block, two blocks an SM (rms_norm_fast.cu, as the next);
//   kBlockRows    the other rows a block holds: a block takes one or more
//                 rows (one, where fewer blocks than SMs would run), each
//                 thread keeping all its loads of them in flight;
//   kRowTeams     rows over a cluster of up to 8 blocks (Hopper), or more
//                 rows than a grid has blocks: teams streaming rows through
//                 shared memory;
//   kGeneral      the rest: other dtypes, rows not of whole 16-byte vectors,
//                 unaligned buffers, and rows too long for a cluster (longer
//                 than models have: correct, not tuned), in the general
//                 kernels (rms_norm_general.cu).
// backward: kShortRows; kColumnSlices, a single row (decoding one
// sequence) of more vectors than a block has threads, on GPUs with
// clusters: one cluster of kColumnSlices blocks, each a slice of its
// columns; kRowsAndColumns, at most
// kMaxRowsAndColumnsRows rows (a decoding batch): a block a row for dx
// beside blocks of column slices of every row for the weight gradient, in
// one kernel (both in rms_norm_column_slices.cu); kRowTeams (rows a team or
// cluster holds) and kGeneral, likewise.
// forward with a residual add (Problem::residual): kBlockRows; kGeneral
// runs the general kernel with the residual add (rms_norm_general.cu).
// 16-bit x with a float32 weight (Problem::float32_weight), as a model
// keeping its weights in float32 has them: the paths for the rows of models,
// kShortRows, kWideRows, kBlockRows and kColumnSlices, and the
// backward's kRowTeams; the general kernels take longer rows.
#ifndef GPU_OPS_RMS_NORM_PLAN_H_
#define GPU_OPS_RMS_NORM_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

namespace gpu_ops {

constexpr int kWarpSize = 32;
constexpr int kMaxThreads = 1024;                       // threads in a block
constexpr int64_t kMaxGrid = (int64_t{1} << 31) - 1;   // blocks in gridDim.x
constexpr int kMaxCluster = 8;  // Hopper's portable cluster limit

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Row teams (rms_norm_fast.cu).
constexpr int kTeamBlockThreads = 512;  // block size when teams share a block
// Registers per thread are capped at 64 by __launch_bounds__(1024). A thread
// holds its values of the weight and of the row it works on (in the
// backward, of dy as well, plus weight-gradient sums): up to this many
// values per row fit (the build fails on a register spill).
constexpr int kMaxForwardValues = 16;
constexpr int kMaxBackwardValues = 8;
// Rows in the shared-memory ring of each cluster row team (RowRing): the one
// being worked on and kStages - 1 on their way (more stages gain nothing).
constexpr int kStages = 3;
// 16-byte loads each thread of the forward keeps in flight when a block holds
// a row (FastForwardKernel): a block takes kForwardLoads / vectors-per-row
// rows. More loads per thread cost registers (16 spill) and gain nothing.
constexpr int kForwardLoads = 4;

// Rows a block of that forward takes: kForwardLoads vectors in flight a
// thread, x's and, with a residual add, as many of the residual's.
constexpr int RowsPerBlock(int vectors, bool residual) {
  const int rows = (residual ? kForwardLoads / 2 : kForwardLoads) / vectors;
  return rows > 1 ? rows : 1;
}

// Short rows (rms_norm_short_rows.cu): blocks of kShortRowsThreads threads,
// a row to a group of lanes of a warp, kShortRowLaneValues values a lane.
// Each thread keeps the loads of kShortRowsForwardRows rows (forward) or of
// dy's and x's vectors of kShortRowsBackwardRows rows (backward) in flight.
constexpr int kShortRowsThreads = 256;
constexpr int kShortRowLaneValues = 8;
constexpr int64_t kShortRowValues = kWarpSize * kShortRowLaneValues;
constexpr int kShortRowsMinLanes = 8;
constexpr int kShortRowsForwardRows = 4;
constexpr int kShortRowsBackwardRows = 2;
constexpr int kShortRowsBackwardBlocks = 3;  // an SM's, at least

// Column slices (rms_norm_column_slices.cu): a cluster of kColumnSlices
// blocks of up to kColumnSliceThreads threads, a thread a 16-byte vector
// column of each of up to kMaxColumnSliceRows rows. For 8 rows, and for a
// row that one block holds a vector a thread (up to 8,192 16-bit values),
// rows and columns (below) ran faster; for longer rows, this.
constexpr int kColumnSlices = kMaxCluster;
constexpr int kColumnSliceThreads = 256;
constexpr int64_t kMaxColumnSliceRows = 1;

// Rows and columns (rms_norm_column_slices.cu): the backward of up to
// kMaxRowsAndColumnsRows rows, a block of up to 1024 threads for each row's
// dx, kMaxRowsAndColumnsVectors 16-byte vectors a thread, and blocks of
// kColumnBlockVectors vector columns of every row for the weight gradient,
// which then needs no partial sums.
constexpr int64_t kMaxRowsAndColumnsRows = 64;
constexpr int kMaxRowsAndColumnsVectors = 2;
constexpr int kColumnBlockVectors = 16;

// How a row is spread over threads.
struct Shape {
  int cluster;  // blocks per row (1: no cluster)
  int team;     // threads per row in one block, a multiple of 32
  int teams;    // rows a block works on at once; blockDim.x = teams * team
  int vectors;  // 16-byte vectors per thread
};

// The fast kernels' element types.
enum class DType { kFloat16, kBFloat16, kFloat32 };

inline int ElementBytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

// The kernels whose residency a plan depends on.
enum class Kernel {
  kRowTeamsForward,   // ClusterForwardKernel<T, vectors, cluster > 1>
  kRowTeamsBackward,  // FastBackwardKernel<T, vectors, cluster > 1>
  kShortRowsBackward,  // ShortRowsBackwardKernel<T, W, lanes>
  kColumnSlices,       // ColumnSlicesBackwardKernel<T, rows>
  kRowsAndColumns,     // RowsAndColumnsBackwardKernel<T, vectors>
};

// What the planner needs to know about a GPU.
class DeviceModel {
 public:
  virtual ~DeviceModel() = default;
  // Whether the kernels may run in clusters of blocks (Hopper code on a
  // Hopper or newer GPU).
  virtual bool Clusters() const = 0;
  // Its SMs: a launch of fewer blocks leaves some of them idle.
  virtual int Sms() const = 0;
  // How many blocks (or clusters of shape.cluster blocks) of `kernel`, for
  // elements of `dtype`, with `shared_bytes` of dynamic shared memory each,
  // the GPU runs at once; 0 if it cannot run one.
  virtual int64_t Resident(Kernel kernel, DType dtype, const Shape& shape,
                           int shared_bytes) const = 0;
};

// One call's operands, as the planner sees them.
struct Problem {
  int64_t rows;
  int64_t row_length;
  // x, the weight and the results share one float16, bfloat16 or float32
  // dtype, `dtype` (or x is 16-bit and the weight float32: float32_weight),
  // and their buffers start on 16-byte boundaries; else only the general
  // kernels take them.
  bool fast_dtypes;
  DType dtype;  // x's
  int64_t num_partials;  // rows of the weight-gradient scratch (backward)
  // The forward adds a residual to x first: only kBlockRows has kernels
  // for it, and kGeneral's residual kernel takes the other rows.
  bool residual = false;
  // x is 16-bit and the weight (so the weight gradient, and y and dy unless
  // they take x's dtype) float32: not every path takes that (see above).
  bool float32_weight = false;
};

enum class Path {
  kShortRows,
  kColumnSlices,
  kRowsAndColumns,
  kWideRows,
  kBlockRows,
  kRowTeams,
  kGeneral,
};

// A launch: `groups` blocks (or clusters of shape.cluster blocks) of
// `shape`, with `shared_bytes` of dynamic shared memory each, and what the
// path's kernel is told beyond its launch. (kernel_plans.kernel_plan names
// these by what they are for each path: module.cc's PlanDict.)
struct Plan {
  Path path = Path::kGeneral;
  Shape shape = {1, 0, 1, 0};
  int64_t groups = 0;
  int shared_bytes = 0;
  // Rows each team of threads loads at once: short rows (a team is a group
  // of lanes) and block rows (a block is one team) choose their kernel by
  // it; every other path takes one row at a time.
  int team_rows = 1;
  // The row teams' backward: rows whose weight gradient each team adds up
  // into one partial row.
  int64_t rows_per_partial = 0;
};

// Paths the planner must not take, as a set of bits (1 << Path): to measure
// a path against the one it would otherwise leave to, and to run every path
// on one GPU. The general kernels, which take every input, stay.
using PathSet = uint32_t;

inline bool Contains(PathSet paths, Path path) {
  return (paths >> static_cast<int>(path)) & 1u;
}

// A path the planner tried and passed over, and why: what
// kernel_plans.kernel_plan reports beside the plan. The handlers do not ask
// (nullptr), so planning a call stays free of allocations.
struct Refusal {
  Path path;
  const char* why;
};
using Refusals = std::vector<Refusal>;

Plan PlanForward(const Problem& problem, const DeviceModel& device,
                 PathSet without = 0, Refusals* refused = nullptr);
Plan PlanBackward(const Problem& problem, const DeviceModel& device,
                  PathSet without = 0, Refusals* refused = nullptr);

const char* PathName(Path path);

// The set of the comma-separated path names in `names` (PathName's), or
// false if one is not the name of a path that may be left out.
bool ParsePaths(const std::string& names, PathSet* paths);

// The names of the paths that may be left out, comma-separated (for errors).
std::string LeavablePathNames();

// What every CUDA handler's plan leaves out in this process: nothing, unless
// a benchmark or a test asks (gpu_ops.kernel_plans.leave_out), so that one
// GPU runs and measures every path: paths to leave out, and clusters (then
// the handlers plan as for a GPU without them, such as an A100). Set between
// calls; each call reads it, and parses nothing.
void LeaveOutOfPlans(PathSet paths, bool clusters);
PathSet PathsLeftOutOfPlans();
bool ClustersLeftOutOfPlans();

}  // namespace gpu_ops

#endif  // GPU_OPS_RMS_NORM_PLAN_H_
