"""Writes one set of kernel variants: make_variants.py SET (the sets: below).

Each variant is a copy of gpu_ops/csrc, as it was at the commit the set was
run on, with one change, in variants/NAME/ (ignored by git); run_set.sh
builds each with bench_kernels.cu, checks its results and times it against
`base` (that commit's kernels). The sources come from git history, so a set
still writes what was timed after the kernels have moved on; on a machine
without the history, write the variants where it is and carry variants/.
The sets: shapes_and_registers (below; commit bae9fe9; the run in
h200_shapes_and_registers.log), and one per NAME_variants.py here, whose
docstring names the log of its run and whose COMMIT the commit it edits
(make_variants.py with an unknown SET lists them).
"""
import importlib
import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
FAST = "rms_norm_fast.cu"
SPLIT = "rms_norm_split_rows.cu"
COMMON = "fast_kernels_common.cuh"
SCRATCH = "cuda_scratch.h"
GRID = "rms_norm_grid_backward.cu"  # rms_norm_grid_rows.cu from commit 9e9c7ee on
SHARED = "rms_norm_shared_rows.cu"
# Edits of the grid backward that leave a step out (wrong results), shared by
# the sets that time what the step costs.
GRID_SYNC = "  cooperative_groups::this_grid().sync();\n"
GRID_DX_STORE = ("    StoreInputGradient(dys, xs, wv, inv, correction,\n"
                 "                       reinterpret_cast<P*>(dx) + int64_t{row} * row_vectors,\n"
                 "                       row_vectors, at);\n")
NO_GRID_SYNC = {GRID: [(GRID_SYNC, "")]}
NO_GRID_DX_STORE = {GRID: [(GRID_DX_STORE, "")]}
SHAPES_AND_REGISTERS_COMMIT = "bae9fe9"


def git(*args):
    return subprocess.run(["git", "-C", str(HERE), *args], check=True,
                          capture_output=True, text=True).stdout


def source(commit, name):
    """The text of gpu_ops/csrc/NAME at `commit`."""
    return git("show", f"{commit}:gpu_ops/csrc/{name}")


def between(text, start, end):
    """The text from `start` up to (not including) `end`."""
    i = text.index(start)
    return text[i:text.index(end, i)]


FORWARD_CALL = """FastForwardKernel<T, kVectors, {rows}{min_blocks}>
                      <<<static_cast<unsigned>({grid}), shape.team, 0, stream>>>(
                          static_cast<const T*>(b.x.untyped_data()),
                          static_cast<const T*>(b.w.untyped_data()),
                          static_cast<T*>(b.y.untyped_data()),
                          static_cast<float*>(b.inv_rms.untyped_data()), g.rows,
                          row_vectors, static_cast<float>(g.row_length),
                          static_cast<float>(eps));
                  return CheckLaunch("launching the forward kernel");"""
FORWARD_BRANCH = "              if (shape.cluster == 1 && CeilDiv(g.rows, kRows) <= kMaxGrid) {\n"


def forward_first(condition, call):
    """An edit that launches `call` before the usual forward when `condition` holds."""
    return (FORWARD_BRANCH,
            f"              {condition} {{\n                  {call}\n                }}}}\n" + FORWARD_BRANCH)


def team_cap(forward, backward):
    """Teams of at most `forward` / `backward` threads (a cluster beyond that)."""
    return [
        ("std::optional<Shape> PickShape(int64_t row_vectors, int max_vectors,\n"
         "                               int max_cluster) {",
         "std::optional<Shape> PickShape(int64_t row_vectors, int max_vectors,\n"
         "                               int max_cluster, int max_team) {"),
        ("      if (threads > kMaxThreads) continue;", "      if (threads > max_team) continue;"),
        ("template <typename T, int kMaxValues, typename Fn>",
         "template <typename T, int kMaxValues, int kMaxTeam, typename Fn>"),
        ("PickShape(row_vectors, kMaxVectors, MaxCluster());",
         "PickShape(row_vectors, kMaxVectors, MaxCluster(), kMaxTeam);"),
        ("WithShape<T, kMaxForwardValues>(", f"WithShape<T, kMaxForwardValues, {forward}>("),
        ("WithShape<T, kMaxBackwardValues>(", f"WithShape<T, kMaxBackwardValues, {backward}>("),
    ]


ROWS_BACKWARD_KERNEL = r"""// Backward of rows a block holds, with no ring: each thread loads its vectors
// of kRows rows of dy and x straight into registers, one barrier per kRows rows.
template <typename T, int kVectors, int kRows>
__global__ void __launch_bounds__(kMaxThreads, 1)
    RowsBackwardKernel(const T* __restrict__ dy,
                       const float* __restrict__ inv_rms,
                       const T* __restrict__ x, const T* __restrict__ w,
                       T* __restrict__ dx, float* __restrict__ partials,
                       int64_t rows, int row_vectors, int64_t num_partials,
                       int64_t rows_per_partial, Shape shape,
                       float row_length) {
  using P = Pack<T>;
  extern __shared__ __align__(128) float4 ring_memory[];
  __shared__ float warp_sums[2][kRows][kMaxThreads / kWarpSize];
  const Place at = ThreadPlace(shape);
  const int64_t segment = int64_t{blockIdx.x} * shape.teams + at.team;
  const int64_t begin = segment * rows_per_partial;
  const int64_t end = segment < num_partials
                          ? std::min(begin + rows_per_partial, rows)
                          : begin;
  const P* dyp = reinterpret_cast<const P*>(dy);
  const P* xp = reinterpret_cast<const P*>(x);
  P* dxp = reinterpret_cast<P*>(dx);
  P wv[kVectors];
  LoadVectors(reinterpret_cast<const P*>(w), row_vectors, at, wv);
  float dw[kVectors][P::kSize] = {};
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int team_warps = shape.team / kWarpSize;
  const int first_warp = at.team * team_warps;
  int half = 0;
  for (int64_t row0 = begin; row0 < begin + rows_per_partial;
       row0 += kRows, half ^= 1) {
    P dyv[kRows][kVectors], xv[kRows][kVectors];
    float inv[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = row0 + r;
      const bool exists = row < end;
#pragma unroll
      for (int k = 0; k < kVectors; ++k) {
        const int c = at.first + k * at.stride;
        const bool ok = exists && c < row_vectors;
        dyv[r][k] = VectorOrZeros(ok, dyp + row * row_vectors + c);
        xv[r][k] = VectorOrZeros(ok, xp + row * row_vectors + c);
      }
      inv[r] = exists ? inv_rms[row] : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float dot = 0;
#pragma unroll
      for (int k = 0; k < kVectors; ++k) {
#pragma unroll
        for (int e = 0; e < P::kSize; ++e) {
          const float d = ToAcc<float>(dyv[r][k].v[e]);
          const float v = ToAcc<float>(xv[r][k].v[e]);
          dot += d * ToAcc<float>(wv[k].v[e]) * v;
          dw[k][e] += d * v * inv[r];
        }
      }
      dot = WarpSum(dot);
      if (lane == 0) warp_sums[half][r][warp] = dot;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float total = WarpSum(
          lane < team_warps ? warp_sums[half][r][first_warp + lane] : 0.0f);
      const float correction = inv[r] * inv[r] * total / row_length;
      if (row0 + r < end) {
        StoreInputGradient(dyv[r], xv[r], wv, inv[r], correction,
                           dxp + (row0 + r) * row_vectors, row_vectors, at);
      }
    }
  }
  StartNextKernel();
  float* partial = partials + int64_t{blockIdx.x} * row_vectors * P::kSize;
  if (shape.teams > 1) {
    StoreBlockPartials<P>(dw, reinterpret_cast<float*>(ring_memory), partial,
                          row_vectors, at, shape);
    return;
  }
  StorePartials(dw, partial, row_vectors, at);
}"""


def rows_backward(rows):
    """The backward of rows a block holds with `rows` rows in registers, no ring."""
    launch = f"""                  groups = CeilDiv(num_partials, shape.teams);
                  constexpr int kV = decltype(vectors)::value;
                  if (shape.cluster == 1) {{
                    constexpr int kRowsB = std::max(1, {rows} / kV);
                    const int smem = shape.teams > 1 ? shape.teams * shape.team * kV * Pack<T>::kSize * 4 : 0;
                    return Launch(stream, RowsBackwardKernel<T, kV, kRowsB>, shape, groups, smem,
                        "launching the backward kernel",
                        static_cast<const T*>(b.dy.untyped_data()),
                        static_cast<const float*>(b.inv_rms.untyped_data()),
                        static_cast<const T*>(b.x.untyped_data()),
                        static_cast<const T*>(b.w.untyped_data()),
                        static_cast<T*>(b.dx.untyped_data()), partials,
                        g.rows, row_vectors, num_partials,
                        CeilDiv(g.rows, num_partials), shape,
                        static_cast<float>(g.row_length));
                  }}
                  return DispatchClustered(shape, [&](auto clustered) {{"""
    return [
        ("\n// The smallest cluster, then the most vectors per thread",
         ROWS_BACKWARD_KERNEL + "\n// The smallest cluster, then the most vectors per thread"),
        ("                  groups = CeilDiv(num_partials, shape.teams);\n"
         "                  return DispatchClustered(shape, [&](auto clustered) {", launch),
    ]


PAIRED_STORE = """      Pack<T> out;
      if constexpr (std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>) {
#pragma unroll
        for (int e = 0; e < Pack<T>::kSize; e += 2) {
          T two[2];
          if constexpr (std::is_same_v<T, __nv_bfloat16>) {
            const __nv_bfloat162 pair = __floats2bfloat162_rn(value(k, e), value(k, e + 1));
            two[0] = pair.x, two[1] = pair.y;
          } else {
            const __half2 pair = __floats2half2_rn(value(k, e), value(k, e + 1));
            two[0] = pair.x, two[1] = pair.y;
          }
          out.v[e] = two[0];
          out.v[e + 1] = two[1];
        }
      } else {
#pragma unroll
        for (int e = 0; e < Pack<T>::kSize; ++e) out.v[e] = Storage<T>::From(value(k, e));
      }
      row[c] = out;"""

# name: (what it changes, {file: [(old, new), ...]})
VARIANTS = {
    "base": ("the kernels as committed", {}),
    "f512": ("forward: 16-bit rows that take 1024-thread teams take 512 threads of 4 vectors", {FAST: [
        ("        return WithShape<T, kMaxForwardValues>(\n            row_vectors,\n"
         "            [&](const Shape& shape,\n                auto vectors) -> std::optional<ffi::Error> {",
         "        auto launch =\n            [&](const Shape& shape,\n"
         "                auto vectors) -> std::optional<ffi::Error> {"),
        ("                              static_cast<float>(eps));\n              });\n            });\n      });\n}",
         "                              static_cast<float>(eps));\n              });\n            };\n"
         "        if (sizeof(T) == 2 && row_vectors > 2 * kTeamBlockThreads &&\n"
         "            row_vectors <= 4 * kTeamBlockThreads) {\n"
         "          return WithShape<T, 2 * kMaxForwardValues>(row_vectors, launch);\n        }\n"
         "        return WithShape<T, kMaxForwardValues>(row_vectors, launch);\n      });\n}"),
    ]}),
    "cvt2": ("16-bit results converted two at a time (__floats2bfloat162_rn)", {COMMON: [
        ("      Pack<T> out;\n#pragma unroll\n      for (int e = 0; e < Pack<T>::kSize; ++e) {\n"
         "        out.v[e] = Storage<T>::From(value(k, e));\n      }\n      row[c] = out;", PAIRED_STORE),
        ("#include <optional>\n", "#include <optional>\n#include <type_traits>\n"),
    ]}),
    "fk2": ("forward: 1024-thread teams of 2 vectors take one row per block, two blocks per SM "
            "(__launch_bounds__(1024, 2): 32 registers)", {FAST: [
        ("template <typename T, int kVectors, int kRows>\n__global__ void __launch_bounds__(kMaxThreads)\n"
         "    FastForwardKernel(",
         "template <typename T, int kVectors, int kRows, int kMinBlocks = 1>\n"
         "__global__ void __launch_bounds__(kMaxThreads, kMinBlocks)\n    FastForwardKernel("),
        forward_first("if constexpr (kVectors == 2) { if (shape.cluster == 1 && shape.team == kMaxThreads)",
                      FORWARD_CALL.format(rows=1, min_blocks=", 2", grid="g.rows")),
    ]}),
    "r4": ("forward: twice the rows per block (8 loads in flight) for at most 1,024 rows", {FAST: [
        forward_first("if constexpr (kVectors <= 2) { if (shape.cluster == 1 && g.rows <= 1024)",
                      FORWARD_CALL.format(rows="2 * kRows", min_blocks="",
                                          grid="CeilDiv(g.rows, 2 * kRows)")),
    ]}),
    "b3": ("backward without a cluster: __launch_bounds__(512, 3), three blocks per SM", {FAST: [
        ("template <typename T, int kVectors, bool kClustered>\n__global__ void __launch_bounds__(kMaxThreads, 1)\n"
         "    FastBackwardKernel(",
         "template <typename T, int kVectors, bool kClustered>\n"
         "__global__ void __launch_bounds__(kMaxThreads / (kClustered ? 1 : 2), kClustered ? 1 : 3)\n"
         "    FastBackwardKernel("),
    ]}),
    "seg2k": ("up to 2,048 weight-gradient segments (1,024)", {SCRATCH: [
        ("constexpr int64_t kMaxSegments = 1024;", "constexpr int64_t kMaxSegments = 2048;"),
    ]}),
    "c16": ("clusters of up to 16 blocks (non-portable size) for rows too long for 8", {
        COMMON: [("constexpr int kMaxCluster = 8;  // Hopper's portable cluster limit",
                  "constexpr int kMaxCluster = 16;")],
        FAST: [("    int groups = 0;\n    if (cudaFuncSetAttribute(kernel,",
                "    int groups = 0;\n    if (shape.cluster > 8 && cudaFuncSetAttribute(kernel, "
                "cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {\n"
                "      cudaGetLastError();\n      return 0;\n    }\n"
                "    if (cudaFuncSetAttribute(kernel,")]}),
    "p1": ("split-row backward: pass 1 in the forward's larger chunks (16 values per thread)", {SPLIT: [
        ("                        int64_t rows, int row_vectors, int chunks,\n"
         "                        int64_t num_partials, int64_t rows_per_partial,",
         "                        int64_t rows, int row_vectors, int chunks, int sum_chunks,\n"
         "                        int64_t num_partials, int64_t rows_per_partial,"),
        ("inv * inv * RowTotal(chunk_sums + row * chunks, chunks) / row_length;",
         "inv * inv * RowTotal(chunk_sums + row * sum_chunks, sum_chunks) / row_length;"),
        ("        if (auto err = SumChunks<T, kVectors>(stream, b.chunk_sums, g, dy, x,\n"
         "                                              w, &split);\n"
         "            err.failure()) {\n          return err;\n        }",
         "        if (auto err = SumChunks<T, kVectorsOf<T, kSplitForwardValues>>(\n"
         "                stream, b.chunk_sums, g, dy, x, w, &split);\n"
         "            err.failure()) {\n          return err;\n        }\n"
         "        const int sum_chunks = split.chunks;\n"
         "        split.chunks = static_cast<int>(\n"
         "            CeilDiv(split.row_vectors, int64_t{kSplitThreads} * kVectors));"),
        ("                split.row_vectors, split.chunks, segments,",
         "                split.row_vectors, split.chunks, sum_chunks, segments,"),
    ]}),
    "t512f": ("forward teams of at most 512 threads (a cluster beyond that)", {FAST: team_cap(512, 1024)}),
    "t512b": ("backward teams of at most 512 threads (a cluster beyond that)", {FAST: team_cap(1024, 512)}),
    "rb1": ("backward of rows a block holds: one row's vectors in registers per step, no ring",
            {FAST: rows_backward(1)}),
    "rb2": ("the same with two rows (of one vector) per step", {FAST: rows_backward(2)}),
}


def main():
    chosen = sys.argv[1] if len(sys.argv) > 1 else "shapes_and_registers"
    if chosen == "shapes_and_registers":
        commit, variants = SHAPES_AND_REGISTERS_COMMIT, VARIANTS
    elif (HERE / f"{chosen}_variants.py").is_file():
        module = importlib.import_module(f"{chosen}_variants")
        commit, variants = module.COMMIT, module.VARIANTS
    else:
        sets = "\n".join(f"  {path.name[:-len('_variants.py')]}: "
                         f"{importlib.import_module(path.stem).__doc__.splitlines()[0]}"
                         for path in sorted(HERE.glob("*_variants.py")))
        raise SystemExit("usage: make_variants.py SET, one of shapes_and_registers and\n" + sets)
    names = [pathlib.PurePath(path).name
             for path in git("ls-tree", "--name-only", "--full-tree", commit, "gpu_ops/csrc/").split()]
    out = HERE / "variants"
    shutil.rmtree(out, ignore_errors=True)
    for name, (what, edits, *other) in variants.items():
        # A variant is (what, edits) on `commit`'s files, or (what, edits,
        # other_commit) on another commit's, to time two commits side by side.
        files_from = other[0] if other else commit
        folder = out / name
        folder.mkdir(parents=True)
        for file_name in names:
            text = source(files_from, file_name)
            for old, new in edits.get(file_name, []):
                if text.count(old) != 1:
                    raise SystemExit(f"{name}: {file_name} holds {text.count(old)} copies of {old[:60]!r}")
                text = text.replace(old, new)
            (folder / file_name).write_text(text)
        print(f"{name:6} {what}")


if __name__ == "__main__":
    main()
