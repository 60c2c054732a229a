"""The kernel variants of the run in h200_split_forward.log (make_variants.py split_forward), at the JAX level (run_jax_level.sh).

In the float32 forward of the seed's shape, pass 2 of the split rows
(ChunkForwardKernel: load a chunk of x and of the weight, add up the row's
chunk sums, write the chunk of y) takes 15.5 µs under the profiler where
XLA's normalising kernel, which moves the same bytes, takes 11.5 µs
(h200_split_overlap.log, ../results/earlier_runs/nvidia-h200_timeline_c66f2b7.log). Its threads
hold 4 vectors of x and 4 of the weight, 61 registers: 4 blocks of 256
threads an SM, and each block makes one round trip to memory before it
writes. More blocks an SM keep more loads in flight:
- `wlate`: each weight vector loaded just before the store that needs it
  (as RowForwardKernel does), so only x is held: 46 registers, 5 blocks an
  SM (in 40 or 32, for 6 or 8 blocks, ptxas spilled);
- `v2`: 8 values a thread instead of 16 in both passes (float32: 2 vectors,
  38 registers, 6 blocks an SM; chunks half as long, twice as many blocks).
"""
from make_variants import SCRATCH, SPLIT, between, source

COMMIT = "811d81a"

# Pass 2's loads, row total and store, as at COMMIT.
HELD_WEIGHT = between(source(COMMIT, SPLIT), "    P xv[kVectors], wv[kVectors];\n",
                      "    if (chunk == 0 && threadIdx.x == 0)")
LATE_WEIGHT = """    P xv[kVectors];
    LoadVectors(reinterpret_cast<const P*>(x) + row * row_vectors,
                row_vectors, at, xv);
    WaitForPreviousKernel();  // pass 1 has written the chunk sums
    const float inv = rsqrtf(
        RowTotal(chunk_sums + row * chunks, chunks) / row_length + eps);
    const P* wp = reinterpret_cast<const P*>(w);
    P* yp = reinterpret_cast<P*>(y) + row * row_vectors;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const int c = at.first + k * at.stride;
      if (c < row_vectors) {
        const P wk = wp[c];
        P out;
#pragma unroll
        for (int e = 0; e < P::kSize; ++e) {
          out.v[e] = Storage<T>::From(ToAcc<float>(wk.v[e]) *
                                      (inv * ToAcc<float>(xv[k].v[e])));
        }
        yp[c] = out;
      }
    }
"""
VARIANTS = {
    "base": ("the kernels of 811d81a (those of 5926f00)", {}),
    "wlate": ("pass 2 loads each weight vector at its store", {SPLIT: [(HELD_WEIGHT, LATE_WEIGHT)]}),
    "v2": ("8 values a thread in both forward passes", {SCRATCH: [
        ("constexpr int kSplitForwardValues = 16;", "constexpr int kSplitForwardValues = 8;")]}),
}
