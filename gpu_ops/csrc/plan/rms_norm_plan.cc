#include "plan/rms_norm_plan.h"

#include <algorithm>
#include <atomic>
#include <initializer_list>
#include <limits>
#include <optional>

#include "plan/cuda_scratch.h"

namespace gpu_ops {
namespace {

int VectorValues(const Problem& p) { return 16 / ElementBytes(p.dtype); }

int64_t RowVectors(const Problem& p) {
  return p.row_length / VectorValues(p);
}

// The smallest cluster, then the most vectors per thread (loads in flight are
// what keeps memory busy), that fit a row of `row_vectors` into at most 1024
// threads per block.
std::optional<Shape> RowTeamShape(int64_t row_vectors, int max_vectors,
                                  int max_cluster) {
  for (int cluster = 1; cluster <= max_cluster; cluster *= 2) {
    for (int vectors = max_vectors; vectors >= 1; vectors /= 2) {
      const int64_t threads =
          CeilDiv(CeilDiv(row_vectors, int64_t{cluster} * vectors), kWarpSize) *
          kWarpSize;
      if (threads > kMaxThreads) continue;
      const int team = static_cast<int>(threads);
      const int teams = cluster == 1 ? std::max(1, kTeamBlockThreads / team) : 1;
      return Shape{cluster, team, teams, vectors};
    }
  }
  return std::nullopt;
}

// Notes in `refused`, where the caller asks, that `path` was passed over,
// and why.
std::nullopt_t Refuse(Refusals* refused, Path path, const char* why) {
  if (refused != nullptr) refused->push_back({path, why});
  return std::nullopt;
}

constexpr const char* kLeftOut = "left out of the plans";
constexpr const char* kNoResidualKernel = "it has no kernel with the residual add";
constexpr const char* kRowTooLong = "a row is too long for a cluster of blocks";

// The largest cluster the device runs (1: none).
int MaxCluster(const DeviceModel& device) { return device.Clusters() ? kMaxCluster : 1; }

// Shared memory for rings whose slots hold `words` 16-byte words beside
// each 16-byte vector of x (x's one; with dy's, one more, or two of a
// float32 dy beside 16-bit x). A float32 weight's dy may have x's dtype
// (out_dtype), which the planner does not know: it reserves float32's.
int RingBytes(const Shape& shape, int words) {
  return words * kStages * shape.vectors * shape.teams * shape.team * 16;
}

constexpr const char* kOneDType =
    "x is 16-bit and the weight float32, which its kernels do not take";

// Rows of at most kShortRowValues values, in whole groups of
// kShortRowLaneValues: a group of lanes of a warp a row (the fewest lanes,
// from kShortRowsMinLanes, that hold it), so that a block's warps all load
// and none waits at a barrier for a row's sum. The forward's blocks each take
// their rows in one go, kShortRowsForwardRows a team, or one where that
// leaves SMs without a block; the backward's, no more than the GPU holds at
// once and at most one per row of the weight-gradient scratch, go through
// the rows a grid's width apart, adding up the weight gradient as they go.
std::optional<Plan> ShortRows(const Problem& p, const DeviceModel& device, bool forward,
                              PathSet without, Refusals* refused) {
  if (Contains(without, Path::kShortRows)) return Refuse(refused, Path::kShortRows, kLeftOut);
  if (p.row_length > kShortRowValues) {
    return Refuse(refused, Path::kShortRows, "rows of more than 256 values");
  }
  if (p.row_length % kShortRowLaneValues != 0) {
    return Refuse(refused, Path::kShortRows, "rows not of whole groups of 8 values");
  }
  if (p.residual) return Refuse(refused, Path::kShortRows, kNoResidualKernel);
  int lanes = kShortRowsMinLanes;
  while (lanes * kShortRowLaneValues < p.row_length) lanes *= 2;
  Plan plan;
  plan.path = Path::kShortRows;
  // (a lane's values are kShortRowLaneValues, not whole vectors: vectors 1)
  plan.shape = Shape{1, lanes, kShortRowsThreads / lanes, 1};
  plan.team_rows = forward ? kShortRowsForwardRows : kShortRowsBackwardRows;
  plan.groups = CeilDiv(p.rows, int64_t{plan.shape.teams} * plan.team_rows);
  if (forward) {
    if (plan.groups < device.Sms()) {
      plan.team_rows = 1;
      plan.groups = CeilDiv(p.rows, plan.shape.teams);
    }
    if (plan.groups > kMaxGrid) {
      return Refuse(refused, Path::kShortRows, "more rows than a grid has blocks");
    }
    return plan;
  }
  const int64_t resident = device.Resident(Kernel::kShortRowsBackward, p.dtype, plan.shape, 0);
  if (resident < 1) return Refuse(refused, Path::kShortRows, "its blocks do not fit an SM");
  plan.groups = std::min({plan.groups, resident, p.num_partials});
  return plan;
}

// The backward of one row (at most kMaxColumnSliceRows) of more vectors
// than a block has threads, on a GPU with clusters: one cluster, each block
// a slice of its columns, a thread a vector column.
std::optional<Plan> ColumnSlices(const Problem& p, const DeviceModel& device, PathSet without,
                                 Refusals* refused) {
  if (Contains(without, Path::kColumnSlices)) {
    return Refuse(refused, Path::kColumnSlices, kLeftOut);
  }
  if (!device.Clusters()) return Refuse(refused, Path::kColumnSlices, "the GPU runs no clusters");
  if (p.rows > kMaxColumnSliceRows) {
    return Refuse(refused, Path::kColumnSlices, "more than one row");
  }
  if (RowVectors(p) <= kMaxThreads) {
    return Refuse(refused, Path::kColumnSlices,
                  "a block holds the row, a vector a thread (rows and columns)");
  }
  const int64_t threads = CeilDiv(CeilDiv(RowVectors(p), kColumnSlices), kWarpSize) * kWarpSize;
  if (threads > kColumnSliceThreads) {
    return Refuse(refused, Path::kColumnSlices,
                  "a row has more vectors than 8 blocks of 256 threads");
  }
  Plan plan;
  plan.path = Path::kColumnSlices;
  plan.shape = Shape{kColumnSlices, static_cast<int>(threads), 1, 1};
  plan.groups = 1;
  if (device.Resident(Kernel::kColumnSlices, p.dtype, plan.shape, 0) < 1) {
    return Refuse(refused, Path::kColumnSlices, "its cluster does not fit the GPU");
  }
  return plan;
}

// The backward of at most kMaxRowsAndColumnsRows rows: a block a row for dx,
// its threads each kMaxRowsAndColumnsVectors or fewer 16-byte vectors, and
// blocks of kColumnBlockVectors vector columns of every row for the weight
// gradient. The two kinds of block need nothing of each other, so one
// kernel runs both, and the weight gradient takes no partial sums and no
// second kernel: for a decoding batch those two kernels' latencies were
// most of the row-teams backward's time. Each column block adds up its
// columns over every row in turn, a loop that more rows would lengthen:
// batches of more than kMaxRowsAndColumnsRows take the row teams.
std::optional<Plan> RowsAndColumns(const Problem& p, const DeviceModel& device,
                                   PathSet without, Refusals* refused) {
  if (Contains(without, Path::kRowsAndColumns)) {
    return Refuse(refused, Path::kRowsAndColumns, kLeftOut);
  }
  if (p.rows > kMaxRowsAndColumnsRows) {
    return Refuse(refused, Path::kRowsAndColumns, "more than 64 rows");
  }
  const int64_t row_vectors = RowVectors(p);
  const int64_t vectors = CeilDiv(row_vectors, kMaxThreads);
  if (vectors > kMaxRowsAndColumnsVectors) {
    return Refuse(refused, Path::kRowsAndColumns,
                  "a row has more than 2,048 vectors of 16 bytes");
  }
  const int team = static_cast<int>(CeilDiv(row_vectors, vectors * kWarpSize) * kWarpSize);
  Plan plan;
  plan.path = Path::kRowsAndColumns;
  plan.shape = Shape{1, team, 1, static_cast<int>(vectors)};
  plan.groups = p.rows + CeilDiv(row_vectors, kColumnBlockVectors);  // the rows' blocks first
  if (device.Resident(Kernel::kRowsAndColumns, p.dtype, plan.shape, 0) < 1) {
    return Refuse(refused, Path::kRowsAndColumns, "its blocks do not fit an SM");
  }
  return plan;
}

// Why 16-bit rows of more than 512 threads a block do not get a block each
// (FastForwardKernel, its weight loaded late), or nullptr where they do.
// Loading the weight late pays only where an SM holds two such blocks: with
// fewer rows than SMs it holds one, and block rows (the weight in registers)
// ran faster.
const char* NotWideRows(const Problem& p, const Shape& shape, const DeviceModel& device,
                        PathSet without) {
  if (p.residual) return kNoResidualKernel;
  if (Contains(without, Path::kWideRows)) return kLeftOut;
  if (ElementBytes(p.dtype) != 2) return "x is not 16-bit";
  if (shape.cluster != 1) return "a row needs a cluster of blocks";
  if (shape.team <= kMaxThreads / 2) return "a row takes at most 512 threads";
  if (p.rows < device.Sms()) return "fewer rows than SMs";
  if (p.rows > kMaxGrid) return "more rows than a grid has blocks";
  return nullptr;
}

std::optional<Plan> RowTeamsForward(const Problem& p, const DeviceModel& device,
                                    PathSet without, Refusals* refused) {
  const std::optional<Shape> shape = RowTeamShape(
      RowVectors(p), kMaxForwardValues / VectorValues(p), MaxCluster(device));
  if (!shape) {
    for (Path path : {Path::kWideRows, Path::kBlockRows}) Refuse(refused, path, kRowTooLong);
    return Refuse(refused, Path::kRowTeams, kRowTooLong);
  }
  Plan plan;
  plan.shape = *shape;
  // 16-bit rows in blocks of more than 512 threads: one row a block, so that
  // an SM holds two blocks (FastForwardKernel, its weight loaded late).
  if (const char* why = NotWideRows(p, *shape, device, without)) {
    Refuse(refused, Path::kWideRows, why);
  } else {
    plan.path = Path::kWideRows;
    plan.shape.teams = 1;  // a row a block: blocks of one team
    plan.groups = p.rows;
    return plan;
  }
  // A block holds a row, and a grid covers all rows: one block per
  // RowsPerBlock rows, or per row where fewer blocks than SMs would run.
  int rows_per_block = RowsPerBlock(shape->vectors, p.residual);
  if (CeilDiv(p.rows, rows_per_block) < device.Sms()) rows_per_block = 1;
  if (Contains(without, Path::kBlockRows)) {
    Refuse(refused, Path::kBlockRows, kLeftOut);
  } else if (shape->cluster != 1) {
    Refuse(refused, Path::kBlockRows, "a row needs a cluster of blocks");
  } else if (CeilDiv(p.rows, rows_per_block) > kMaxGrid) {
    Refuse(refused, Path::kBlockRows, "more rows than a grid has blocks");
  } else {
    plan.path = Path::kBlockRows;
    plan.shape.teams = 1;  // blocks of one team, which takes rows_per_block rows
    plan.groups = CeilDiv(p.rows, rows_per_block);
    plan.team_rows = rows_per_block;
    return plan;
  }
  // Rows over a cluster (or more rows than a grid's blocks): as many groups
  // as run at once, each working through many rows.
  if (p.residual) return Refuse(refused, Path::kRowTeams, kNoResidualKernel);
  if (p.float32_weight) return Refuse(refused, Path::kRowTeams, kOneDType);
  if (Contains(without, Path::kRowTeams)) return Refuse(refused, Path::kRowTeams, kLeftOut);
  plan.shared_bytes = RingBytes(*shape, 1);
  const int64_t resident = device.Resident(
      Kernel::kRowTeamsForward, p.dtype, *shape, plan.shared_bytes);
  if (resident < 1) {
    return Refuse(refused, Path::kRowTeams, "its blocks and shared memory do not fit an SM");
  }
  plan.path = Path::kRowTeams;
  plan.groups = std::min(CeilDiv(p.rows, shape->teams), resident);
  return plan;
}

std::optional<Plan> RowTeamsBackward(const Problem& p,
                                     const DeviceModel& device,
                                     PathSet without, Refusals* refused) {
  if (Contains(without, Path::kRowTeams)) return Refuse(refused, Path::kRowTeams, kLeftOut);
  const std::optional<Shape> shape = RowTeamShape(
      RowVectors(p), kMaxBackwardValues / VectorValues(p), MaxCluster(device));
  if (!shape) return Refuse(refused, Path::kRowTeams, kRowTooLong);
  Plan plan;
  plan.path = Path::kRowTeams;
  plan.shape = *shape;
  plan.shared_bytes = RingBytes(*shape, p.float32_weight ? 3 : 2);
  const int64_t resident =
      device.Resident(Kernel::kRowTeamsBackward, p.dtype, *shape, plan.shared_bytes);
  if (resident < 1) {
    return Refuse(refused, Path::kRowTeams, "its blocks and shared memory do not fit an SM");
  }
  // A team a partial row, in no more groups than the GPU runs at once: a
  // second wave of groups would start after the first's slowest.
  plan.groups = std::min(CeilDiv(p.num_partials, shape->teams), resident);
  plan.rows_per_partial =
      CeilDiv(p.rows, std::min(plan.groups * shape->teams, p.num_partials));
  if (plan.rows_per_partial > std::numeric_limits<int>::max()) {  // the kernel counts in 32 bits
    return Refuse(refused, Path::kRowTeams, "more than 2^31 - 1 rows a team");
  }
  return plan;
}

// Whether the fast kernels take the problem at all.
bool Fast(const Problem& p) {
  if (!p.fast_dtypes || p.rows < 1) return false;
  if (p.float32_weight && ElementBytes(p.dtype) != 2) return false;
  return p.row_length % VectorValues(p) == 0 &&
         RowVectors(p) <= std::numeric_limits<int>::max();
}

}  // namespace

// The general kernels' plan, each fast path refused for `why`.
Plan General(std::initializer_list<Path> paths, const char* why, Refusals* refused) {
  for (Path path : paths) Refuse(refused, path, why);
  return Plan{};
}

constexpr const char* kNotFast =
    "the fast kernels take one float16, bfloat16 or float32 dtype, rows of whole "
    "16-byte vectors and aligned buffers";

Plan PlanForward(const Problem& p, const DeviceModel& device, PathSet without,
                 Refusals* refused) {
  if (!Fast(p)) {
    return General({Path::kShortRows, Path::kWideRows, Path::kBlockRows, Path::kRowTeams},
                   kNotFast, refused);
  }
  if (auto plan = ShortRows(p, device, /*forward=*/true, without, refused)) return *plan;
  if (auto plan = RowTeamsForward(p, device, without, refused)) return *plan;
  return Plan{};
}

Plan PlanBackward(const Problem& p, const DeviceModel& device, PathSet without,
                  Refusals* refused) {
  if (!Fast(p) || p.num_partials < 1) {
    return General({Path::kShortRows, Path::kColumnSlices, Path::kRowsAndColumns,
                    Path::kRowTeams}, kNotFast, refused);
  }
  if (auto plan = ShortRows(p, device, /*forward=*/false, without, refused)) return *plan;
  if (auto plan = ColumnSlices(p, device, without, refused)) return *plan;
  if (auto plan = RowsAndColumns(p, device, without, refused)) return *plan;
  if (auto plan = RowTeamsBackward(p, device, without, refused)) return *plan;
  return Plan{};
}

const char* PathName(Path path) {
  switch (path) {
    case Path::kShortRows: return "short_rows";
    case Path::kColumnSlices: return "column_slices";
    case Path::kRowsAndColumns: return "rows_and_columns";
    case Path::kWideRows: return "wide_rows";
    case Path::kBlockRows: return "block_rows";
    case Path::kRowTeams: return "row_teams";
    case Path::kGeneral: return "general";
  }
  return "unknown";
}

bool ParsePaths(const std::string& names, PathSet* paths) {
  *paths = 0;
  size_t start = 0;
  while (start <= names.size()) {
    const size_t end = std::min(names.find(',', start), names.size());
    const std::string name = names.substr(start, end - start);
    if (!name.empty()) {
      bool known = false;
      for (int i = 0; i < static_cast<int>(Path::kGeneral); ++i) {
        if (name == PathName(static_cast<Path>(i))) {
          *paths |= PathSet{1} << i;
          known = true;
        }
      }
      if (!known) return false;
    }
    start = end + 1;
  }
  return true;
}

std::string LeavablePathNames() {
  std::string names;
  for (int i = 0; i < static_cast<int>(Path::kGeneral); ++i) {
    names += (i == 0 ? "" : ", ") + std::string(PathName(static_cast<Path>(i)));
  }
  return names;
}

namespace {
std::atomic<PathSet> paths_left_out{0};
std::atomic<bool> clusters_left_out{false};
}  // namespace

void LeaveOutOfPlans(PathSet paths, bool clusters) {
  paths_left_out = paths;
  clusters_left_out = clusters;
}

PathSet PathsLeftOutOfPlans() { return paths_left_out; }

bool ClustersLeftOutOfPlans() { return clusters_left_out; }

}  // namespace gpu_ops
