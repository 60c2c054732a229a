# Writes the variants of make_variants.py, builds each with bench_kernels.cu,
# checks their results (BENCH_CHECK) and times them in two rounds (CUDA
# events): the run in h200_shapes_and_registers.log.
set -u
cd "$(dirname "$0")"
python3 make_variants.py
INC=$(python3 -c 'import jax.ffi; print(jax.ffi.include_dir())')
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for v in variants/*/; do
  name=$(basename "$v")
  ( nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Xptxas=--warn-on-spills \
      -I"$v" -I../../gpu_ops/csrc -I"$INC" bench_kernels.cu -o /tmp/bench_$name > /tmp/build_$name.txt 2>&1
    echo "built $name rc=$?"
    grep -o "spilled to local memory in function '[^']*', [0-9]* bytes spill stores" /tmp/build_$name.txt |
      grep -v "slowpath" | sed "s/^/  $name: /" ) &
done
wait
VARIANTS="base f512 cvt2 fk2 r4 b3 seg2k c16 p1 t512f t512b rb1 rb2"
echo "== results against a float64 host reference (max error / max value)"
for v in $VARIANTS; do
  for c in "bf16 16384 1024" "bf16 32 262144" "f32 16384 1024" "bf16 512 4096"; do
    BENCH_CHECK=1 /tmp/bench_$v $v $c | grep -A1 "check:" | paste - - | awk '{$1=$1; print}'
  done
done
echo "== CUDA events, median of 21 runs of 20 launches; two rounds"
/tmp/bench_base base bf16 512 4096 | head -1
for round in 1 2; do
  for v in $VARIANTS; do
    for c in "bf16 16384 1024" "bf16 16384 4096" "bf16 16384 16384" "bf16 32 262144" "bf16 512 4096" \
             "f32 16384 1024" "f32 16384 16384" "f32 32 262144"; do
      /tmp/bench_$v $v $c | grep -v "host us\|copy"
    done
  done
done
