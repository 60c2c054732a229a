"""The kernel variants of the runs in h200_streamed.log (make_variants.py streamed; H200, and an H100 in part 3).

After `once` (h200_square_once.log), the float32 seed shape's forward takes
22.8 µs at the JAX level against XLA's 19.7: the split rows' first pass reads
x, the second reads it again and writes y, and x (32 MiB) and y together do
not fit in the H200's 60 MiB L2. Each line of y that the second pass writes
pushes out a line of x, and in least-recently-used order those are the lines
of x that pass has yet to read. Cache hints can say which lines may go:
- `cs2`: the forward's second pass (ChunkForwardKernel) loads x with
  ld.global.cs (evict first: its last use in the op), so y's lines push out
  what it has read rather than what it will read;
- `cs2_fwd`: `cs2`, with the first pass over the chunks first to last (the
  order the second pass reads them in);
- `el1_cs2`: `cs2`, with the first pass loading x under an L2 evict-last
  policy (createpolicy), so that its lines outlast y's until the second pass
  has read them;
- `cs2b`: `cs2`, with the backward's second pass (ChunkBackwardKernel) also
  loading dy and x with ld.global.cs.
"""
from make_variants import SPLIT

COMMIT = "32c3320"

LOADERS = r"""
// LoadVectors with the loads marked evict first (ld.global.cs): the op's
// last use of these vectors.
template <int kVectors, typename P>
__device__ void LoadLastUse(const P* __restrict__ row, int row_vectors,
                            const Place& at, P (&v)[kVectors]) {
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    const int c = at.first + k * at.stride;
    const uint4 words = c < row_vectors
                            ? __ldcs(reinterpret_cast<const uint4*>(row + c))
                            : make_uint4(0, 0, 0, 0);
    memcpy(&v[k], &words, sizeof(P));
  }
}

// LoadVectors under an L2 evict-last policy: the op reads these again.
template <int kVectors, typename P>
__device__ void LoadKept(const P* __restrict__ row, int row_vectors,
                         const Place& at, P (&v)[kVectors]) {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    const int c = at.first + k * at.stride;
    uint4 words = make_uint4(0, 0, 0, 0);
    if (c < row_vectors) {
      asm("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
          : "=r"(words.x), "=r"(words.y), "=r"(words.z), "=r"(words.w)
          : "l"(row + c), "l"(policy));
    }
    memcpy(&v[k], &words, sizeof(P));
  }
}

// chunk_sums[row * chunks + chunk]"""
ADD_LOADERS = ("\n// chunk_sums[row * chunks + chunk]", LOADERS)
PASS2_X = ("    LoadVectors(reinterpret_cast<const P*>(x) + row * row_vectors,\n"
           "                row_vectors, at, xv);\n"
           "    LoadVectors(reinterpret_cast<const P*>(w), row_vectors, at, wv);\n")
CS2 = [ADD_LOADERS, (PASS2_X, PASS2_X.replace("    LoadVectors(reinterpret_cast<const P*>(x)",
                                              "    LoadLastUse(reinterpret_cast<const P*>(x)", 1))]
FORWARD_ORDER = ("    const int64_t item = rows * chunks - 1 - step;  // last to first\n",
                 "    const int64_t item = kSquares ? step : rows * chunks - 1 - step;\n")
PASS1_A = ("    LoadVectors(reinterpret_cast<const P*>(a) + row * row_vectors, row_vectors,\n"
           "                at, av);\n")
KEPT_A = ("    if constexpr (kSquares) {\n"
          "      LoadKept(reinterpret_cast<const P*>(a) + row * row_vectors, row_vectors,\n"
          "               at, av);\n"
          "    } else {\n"
          "      LoadVectors(reinterpret_cast<const P*>(a) + row * row_vectors,\n"
          "                  row_vectors, at, av);\n"
          "    }\n")
PASS2_BWD = ("      LoadVectors(reinterpret_cast<const P*>(dy) + row * row_vectors,\n"
             "                  row_vectors, at, dyv);\n"
             "      LoadVectors(reinterpret_cast<const P*>(x) + row * row_vectors,\n"
             "                  row_vectors, at, xv);\n")

VARIANTS = {
    "base": ("the kernels of 32c3320", {}),
    "cs2": ("the forward's second pass loads x evict-first (ld.global.cs)", {SPLIT: CS2}),
    "cs2_fwd": ("`cs2`, the forward's first pass over the chunks first to last",
                {SPLIT: CS2 + [FORWARD_ORDER]}),
    "el1_cs2": ("`cs2`, the forward's first pass loading x under an L2 evict-last policy",
                {SPLIT: CS2 + [(PASS1_A, KEPT_A)]}),
    "cs2b": ("`cs2`, the backward's second pass loading dy and x evict-first",
             {SPLIT: CS2 + [(PASS2_BWD, PASS2_BWD.replace("LoadVectors", "LoadLastUse"))]}),
}
