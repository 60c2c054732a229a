#!/usr/bin/env bash
# Times a change given as a patch (one that reaches beyond gpu_ops/csrc, which
# make_variants.py's variants cannot) at the JAX level, against the tree as it
# is: builds gpu_ops, runs rms_norm_bench.py with BENCH_ARGS (gpu_ops and XLA;
# then again with XLA_FLAGS=$BASE_XLA_FLAGS where that is set), applies the
# patch, builds again, runs the GPU tests and the benchmark, and takes the
# patch back out; ROUNDS=N (default 1) runs each benchmark N times. On a GPU
# machine, in the repository root; results under OUT.
#   [ROUNDS=N] [BASE_XLA_FLAGS=...] run_patch.sh PATCH OUT "BENCH_ARGS"
set -u
# shellcheck source=jax_level_steps.sh
. "$(dirname "$0")/jax_level_steps.sh"
patch_file=$1 out=$2 bench_args=$3 rounds=${ROUNDS:-1}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
build() {  # build NAME
  build_gpu_ops "$out/build_$1.log" || { echo "build of $1 failed"; return 1; }
}
bench() {  # bench NAME
  echo "== $1: rms_norm_bench.py $bench_args --impl gpu_ops xla ${XLA_FLAGS:+(XLA_FLAGS=$XLA_FLAGS)}"
  # shellcheck disable=SC2086  # the benchmark's arguments, split
  python3 benchmarks/rms_norm_bench.py $bench_args --impl gpu_ops xla \
    --out "$out/bench_$1.json" 2>&1 | without_log_noise
}
build base || exit 1
for round in $(seq "$rounds"); do
  bench "base_$round"
  if [ -n "${BASE_XLA_FLAGS:-}" ]; then XLA_FLAGS=$BASE_XLA_FLAGS bench "base_flags_$round"; fi
done
patch -p1 --quiet < "$patch_file" || exit 1
if build patched; then
  echo "== patched: tests/test_gpu.py"
  python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -3
  for round in $(seq "$rounds"); do bench "patched_$round"; done
fi
patch -p1 -R --quiet < "$patch_file"
