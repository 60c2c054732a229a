# Builds and runs each variant of rms_norm_fast.cu found in variants/*/ (folders not kept in git).
set -u
INC=$(python3 -c 'import jax.ffi; print(jax.ffi.include_dir())')
cd "$(dirname "$0")"
for v in variants/*/; do
  name=$(basename $v)
  nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Xptxas=--warn-on-spills -I$v -I../../gpu_ops/csrc -I$INC bench_kernels.cu -o /tmp/bench_$name 2>&1 | grep -iE "spill|error" | grep -v "0 bytes spill"
done
for v in variants/*/; do name=$(basename $v); /tmp/bench_$name $name; done
for v in t_f2b1_s4; do
  echo "== ncu $v bf16 16384x8192"
  ncu --clock-control none --kernel-name regex:Fast --launch-skip 5 --launch-count 2 --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" /tmp/bench_$v $v bf16 16384 8192 2>&1 | grep -vE "^==PROF==|^\s*$" | grep -E "Duration|DRAM Through|Compute|stalled|Registers|Achieved Occ" 
done
