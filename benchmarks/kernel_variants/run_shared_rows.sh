# The shared-row forward (rms_norm_shared_rows.cu) against the split-row one
# (BENCH_NO_SHARED=1), with CUDA events: the run in h200_shared_rows.log, part 2.
# Run from the repository root.
cd benchmarks/kernel_variants
INC=$(python3 -c 'import jax.ffi; print(jax.ffi.include_dir())')
nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -I../../gpu_ops/csrc -I$INC bench_kernels.cu -o /tmp/bench 2>&1 | grep error
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== results against a float64 host reference (max error / max value)"
for c in "bf16 32 262144" "f32 32 262144" "bf16 67 131080" "bf16 61 262144"; do
  BENCH_CHECK=1 BENCH_ONLY=fwd /tmp/bench shared $c | grep -A1 "check:" | paste - - | awk '{$1=$1; print}'
done
echo "== CUDA events, median of 21 runs of 20 launches; forward only; two rounds"
/tmp/bench shared bf16 32 262144 | head -1
for r in 1 2; do
  for c in "bf16 32 262144" "f32 32 262144" "bf16 67 131080" "bf16 1024 262144" "f32 512 262144"; do
    BENCH_ONLY=fwd /tmp/bench shared $c | grep -v "host us\|copy" | sed 's/| bwd .*//'
    BENCH_NO_SHARED=1 BENCH_ONLY=fwd /tmp/bench split $c | grep -v "host us\|copy" | sed 's/| bwd .*//'
  done
done
