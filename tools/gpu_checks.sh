#!/usr/bin/env bash
# The GPU evidence run (shared/GPU.md): build with CUDA from a clean tree, the
# whole test suite on the GPU, every chapter under nbval, compute-sanitizer
# on forward and backward, and whether XLA runs the float8 norm's matmul as a
# float8 matmul (tools/fp8_matmul_hlo.py).
# Usage (on a GPU machine, in the repository root): tools/gpu_checks.sh OUTDIR
# It writes OUTDIR/summary.json (tools/gpu_checks_summary.py) beside the logs.
# To split a run over calls of limited length (on one machine, which keeps
# the build): GPU_CHECKS_STEPS chooses among "tests" (the build and the test
# suite), "chapters", "sanitizers", "fp8" and "sharding" (the collectives XLA
# compiles for a mesh of the machine's GPUs, tools/sharding_hlo.py; default:
# all five in that order, "sharding" only where there are several GPUs), and
# GPU_CHECKS_SANITIZERS="memcheck racecheck" runs only those tools (default:
# all four; the sanitizer log is appended to). GPU_CHECKS_CLEAN=0 keeps the build
# of an earlier call on the same machine instead of building from a clean tree.
# GPU_CHECKS_WORKERS=N runs the test suite in N processes (pytest-xdist) that
# share the GPU. The log has a line for each test, so that a summary of a run
# cut off before its end still names the tests that failed until then.
# GPU machines have no jupyter-book, so the book build and its tests are skipped;
# the Python packages the tests and chapters need beyond the machine's own
# come as wheels in .whl/ (tools/gpu_wheels.sh).
set -uo pipefail
out=${1:?usage: tools/gpu_checks.sh OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: ${GPU_OPS_COMMIT:-$(git rev-parse --verify -q HEAD || echo "unknown (pass GPU_OPS_COMMIT)")}"
  echo "pytest selection: ${PYTEST_ADDOPTS:-}"
  echo "test processes: ${GPU_CHECKS_WORKERS:-1}"
  echo "hypothesis profile: ${GPU_OPS_HYPOTHESIS_PROFILE:-long}"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -n 2
  python3 -c 'import jax, jaxlib, sys; print("python", sys.version.split()[0]); print("jax", jax.__version__, "jaxlib", jaxlib.__version__); print(jax.devices())'
  python3 tools/device_properties.py
} > "$out/environment.txt" 2>&1
cat "$out/environment.txt"

if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu_ops_site .whl/*.whl
  export PYTHONPATH=/tmp/gpu_ops_site${PYTHONPATH:+:$PYTHONPATH}
fi

default_steps="tests chapters sanitizers fp8"
if [ "$(nvidia-smi --list-gpus | wc -l)" -gt 1 ]; then
  default_steps+=" sharding"
  # tests/test_processes.py: one process per GPU under jax.distributed
  export GPU_OPS_PROCESS_PLATFORM=${GPU_OPS_PROCESS_PLATFORM:-gpu}
fi
steps=" ${GPU_CHECKS_STEPS:-$default_steps} "
tests_status=0 chapters_status=0 sanitizer_status=0
if [[ $steps == *" tests "* ]]; then
  [ "${GPU_CHECKS_CLEAN:-1}" = 0 ] || rm -rf build
  # Each test's result on a line of its own, so that a run cut off by a time
  # limit still names the tests that failed (gpu_checks_summary.py reads
  # them): build.sh's pytest -q takes one of the two -v back.
  addopts="-v -v ${PYTEST_ADDOPTS:-}"
  test_env=(env PYTEST_ADDOPTS="$addopts")
  if [ "${GPU_CHECKS_WORKERS:-0}" -gt 0 ]; then
    # Each process takes GPU memory as it goes and hands it back when freed
    # (the platform allocator): XLA's own allocator keeps what it once took,
    # and the processes together would hold more than the GPU has.
    test_env=(env XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform
              PYTEST_ADDOPTS="-n $GPU_CHECKS_WORKERS --dist load $addopts")
  fi
  # The property test draws many more cases here than in CI; the seed's
  # kernels, the benchmarks' baseline, are built too (a test runs them).
  GPU_OPS_HYPOTHESIS_PROFILE=${GPU_OPS_HYPOTHESIS_PROFILE:-long} GPU_OPS_APEX_SEED=1 \
  GPU_OPS_NO_VENV=1 GPU_OPS_SKIP_BOOK=1 CUDA_ARCH=${CUDA_ARCH:-90} "${test_env[@]}" ./build.sh test 2>&1 |
    tee "$out/build_and_tests.log"
  tests_status=${PIPESTATUS[0]}
fi

if [[ $steps == *" chapters "* ]]; then
  # Every chapter re-executed and its outputs compared with the stored ones,
  # as in CI: nothing a chapter prints may depend on the platform.
  python3 -m pytest -q -p no:cacheprovider --nbval chapters \
      --nbval-sanitize-with chapters/nbval_sanitize.cfg 2>&1 | tee "$out/nbval.log"
  chapters_status=${PIPESTATUS[0]}
fi

export XLA_PYTHON_CLIENT_PREALLOCATE=false
sanitizers=${GPU_CHECKS_SANITIZERS:-memcheck racecheck initcheck synccheck}
[[ $steps == *" sanitizers "* ]] || sanitizers=
for tool in $sanitizers; do
  # Check only gpu_ops' kernels (their mangled names contain the namespace),
  # except for initcheck: it must see XLA's kernels write our inputs, or it
  # reports every input as uninitialised.
  filter=(--kernel-name kns=gpu_ops)
  [ "$tool" = initcheck ] && filter=()
  echo "== compute-sanitizer --tool $tool ${filter[*]}" | tee -a "$out/compute_sanitizer.log"
  compute-sanitizer --tool "$tool" --error-exitcode 99 \
      "${filter[@]}" python3 tools/sanitizer_workload.py \
      2>&1 | tee -a "$out/compute_sanitizer.log"
  status=${PIPESTATUS[0]}
  echo "== $tool exit status: $status" | tee -a "$out/compute_sanitizer.log"
  [ "$status" = 0 ] || sanitizer_status=1
done
fp8_status=0
if [[ $steps == *" fp8 "* ]]; then
  python3 tools/fp8_matmul_hlo.py --out "$out/fp8_matmul.json" 2>&1 | tee "$out/fp8_matmul.log"
  fp8_status=${PIPESTATUS[0]}
fi
sharding_status=0
if [[ $steps == *" sharding "* ]]; then
  python3 tools/sharding_hlo.py "$out/sharding_hlo.json" 2>&1 | tee "$out/sharding_hlo.log"
  sharding_status=${PIPESTATUS[0]}
fi
# The run's short summary (tools/gpu_checks_summary.py merges several runs
# into a machine's results file).
python3 tools/gpu_checks_summary.py --out "$out/summary.json" "$out"
echo "tests: $tests_status, chapters: $chapters_status, sanitizer: $sanitizer_status," \
  "fp8 matmul check: $fp8_status, sharding: $sharding_status"
exit $(( tests_status || chapters_status || sanitizer_status || fp8_status || sharding_status ))
