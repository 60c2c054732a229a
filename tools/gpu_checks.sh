#!/usr/bin/env bash
# The GPU evidence run (shared/GPU.md): build with CUDA from a clean tree;
# the sweep of every kernel path the planner can choose, at its edges, first
# (tests/test_gpu_sweep.py, with this GPU's plans and with those of a GPU
# without clusters); the property test; the whole test suite on the GPU;
# every chapter under nbval; compute-sanitizer over a subset of the sweep;
# whether XLA runs the float8 norm's matmul as a float8 matmul
# (tools/fp8_matmul_hlo.py); the template as a reader builds it; and the
# recipes' handlers as their chapters build them.
# Usage (on a GPU machine, in the repository root): tools/gpu_checks.sh OUTDIR
# It writes OUTDIR/summary.json (tools/gpu_checks_summary.py) beside the logs.
# To split a run over calls of limited length (on one machine, which keeps
# the build): GPU_CHECKS_STEPS chooses among "sweep" (the build and the
# sweep), "properties" (the property test), "tests" (the build and the rest
# of the test suite), "chapters", "sanitizers", "fp8", "template" (the
# template's test on this GPU and its handlers under compute-sanitizer),
# "recipes" (the same for the recipes' handlers) and "sharding" (the
# collectives XLA compiles for a mesh of the machine's GPUs,
# tools/sharding_hlo.py; default: all in that order, "sharding" only where
# there are several GPUs). GPU_CHECKS_CHAPTERS="chapters/14_*.ipynb" runs
# "chapters" over those only, and GPU_CHECKS_SANITIZERS="memcheck racecheck"
# runs only those tools (default: all four; the sanitizer log is appended
# to). The first of "sweep" and "tests" builds from a clean tree, unless
# GPU_CHECKS_CLEAN=0 keeps the build of an earlier call on the same machine.
# GPU_CHECKS_WORKERS=N runs the sweep and the test suite in N processes
# (pytest-xdist) that share the GPU (default: 14 for the sweep, 1 for the
# suite). The log has a line for each test, so that a summary of a run
# cut off before its end still names the tests that failed until then.
# GPU machines have no jupyter-book, so the book build and its tests are skipped;
# the Python packages the tests and chapters need beyond the machine's own
# come as wheels in .whl/ (tools/gpu_wheels.sh).
set -uo pipefail
out=${1:?usage: tools/gpu_checks.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)  # the template's sanitizer runs in another folder
export PYTHONUNBUFFERED=1
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: ${GPU_OPS_COMMIT:-$(git rev-parse --verify -q HEAD || echo "unknown (pass GPU_OPS_COMMIT)")}"
  echo "pytest selection: ${PYTEST_ADDOPTS:-}"
  echo "test processes: ${GPU_CHECKS_WORKERS:-1}"
  echo "hypothesis profile: ${GPU_OPS_HYPOTHESIS_PROFILE:-long}"
  echo "chapters: ${GPU_CHECKS_CHAPTERS:-chapters}"
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

default_steps="sweep properties tests chapters sanitizers fp8 template recipes"
if [ "$(nvidia-smi --list-gpus | wc -l)" -gt 1 ]; then
  default_steps+=" sharding"
  # tests/test_processes.py: one process per GPU under jax.distributed
  export GPU_OPS_PROCESS_PLATFORM=${GPU_OPS_PROCESS_PLATFORM:-gpu}
fi
steps=" ${GPU_CHECKS_STEPS:-$default_steps} "
sweep_status=0 properties_status=0 tests_status=0 chapters_status=0 sanitizer_status=0
template_status=0 recipes_status=0
clean=${GPU_CHECKS_CLEAN:-1}
# Each test's result on a line of its own, so that a run cut off by a time
# limit still names the tests that failed (gpu_checks_summary.py reads
# them): build.sh's pytest -q takes one of the two -v back.
verbose="-v -v"
# Several pytest processes on one GPU: each takes GPU memory as it goes and
# hands it back when freed (the platform allocator); XLA's own allocator
# keeps what it once took, and the processes together would hold more than
# the GPU has.
shared_gpu=(XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform)
# build.sh test, with a clean -Werror build the first time (and the seed's
# kernels, the benchmarks' baseline, which a test runs), then the tests
# that PYTEST_ADDOPTS (the arguments) names.
build_and_test() {
  [ "$clean" = 0 ] || rm -rf build
  clean=0
  GPU_OPS_APEX_SEED=1 GPU_OPS_NO_VENV=1 GPU_OPS_SKIP_BOOK=1 CUDA_ARCH=${CUDA_ARCH:-90} \
    env "$@" ./build.sh test
}

# sanitize LOG KERNELS "TOOLS" COMMAND...: COMMAND under each of
# compute-sanitizer's TOOLS, appended to LOG; every tool but initcheck sees
# only the kernels whose mangled names contain KERNELS (all where empty),
# while initcheck must see XLA's kernels write the inputs, or it reports
# every input as uninitialised. Fails where any tool does.
sanitize() {
  local log=$1 kernels=$2 tools=$3 failed=0 tool status
  shift 3
  for tool in $tools; do
    local filter=()
    [ -n "$kernels" ] && [ "$tool" != initcheck ] && filter=(--kernel-name "kns=$kernels")
    echo "== compute-sanitizer --tool $tool ${filter[*]}" | tee -a "$log"
    compute-sanitizer --tool "$tool" --error-exitcode 99 "${filter[@]}" "$@" 2>&1 |
      tee -a "$log"
    status=${PIPESTATUS[0]}
    echo "== $tool exit status: $status" | tee -a "$log"
    [ "$status" = 0 ] || failed=1
  done
  return $failed
}

if [[ $steps == *" sweep "* ]]; then
  # its GPU tests: the generator's own tests are CI's
  workers=${GPU_CHECKS_WORKERS:-14}
  build_and_test "${shared_gpu[@]}" \
      PYTEST_ADDOPTS="-n $workers $verbose -m gpu tests/test_gpu_sweep.py" 2>&1 |
    tee "$out/sweep.log"
  sweep_status=${PIPESTATUS[0]}
  # The plans of a GPU without clusters (an A100's), in a process of their
  # own: XLA replays recorded calls without asking the handlers again.
  env "${shared_gpu[@]}" GPU_OPS_PLAN_WITHOUT_CLUSTERS=1 python3 -m pytest -q -n "$workers" \
      $verbose -p no:cacheprovider -m gpu tests/test_gpu_sweep.py 2>&1 |
    tee "$out/sweep_without_clusters.log"
  [ "${PIPESTATUS[0]}" = 0 ] || sweep_status=1
fi

if [[ $steps == *" properties "* ]]; then
  # The property test draws many more cases here than in CI (the gpus
  # profile: few-row, odd-length and mesh cases), for every implementation.
  profile=${GPU_OPS_HYPOTHESIS_PROFILE:-gpus}
  echo "hypothesis profile: $profile" > "$out/properties.log"
  env "${shared_gpu[@]}" GPU_OPS_HYPOTHESIS_PROFILE=$profile \
    python3 -m pytest -q -n 3 -p no:cacheprovider $verbose tests/test_properties.py 2>&1 |
    tee -a "$out/properties.log"
  properties_status=${PIPESTATUS[0]}
fi

if [[ $steps == *" tests "* ]]; then
  # the rest of the suite: without the sweep, and without the property test
  # where its own step ran it
  addopts="$verbose --ignore=tests/test_gpu_sweep.py ${PYTEST_ADDOPTS:-}"
  [[ $steps == *" properties "* ]] && addopts+=" --ignore=tests/test_properties.py"
  test_env=(PYTEST_ADDOPTS="$addopts")
  if [ "${GPU_CHECKS_WORKERS:-0}" -gt 0 ]; then
    test_env=("${shared_gpu[@]}" PYTEST_ADDOPTS="-n $GPU_CHECKS_WORKERS --dist load $addopts")
  fi
  GPU_OPS_HYPOTHESIS_PROFILE=${GPU_OPS_HYPOTHESIS_PROFILE:-long} build_and_test "${test_env[@]}" 2>&1 |
    tee "$out/build_and_tests.log"
  tests_status=${PIPESTATUS[0]}
fi

if [[ $steps == *" chapters "* ]]; then
  # Every chapter (or those GPU_CHECKS_CHAPTERS names) re-executed and its
  # outputs compared with the stored ones, as in CI: nothing a chapter
  # prints may depend on the platform.
  python3 -m pytest -q -p no:cacheprovider --nbval ${GPU_CHECKS_CHAPTERS:-chapters} \
      --nbval-sanitize-with chapters/nbval_sanitize.cfg 2>&1 | tee "$out/nbval.log"
  chapters_status=${PIPESTATUS[0]}
fi

export XLA_PYTHON_CLIENT_PREALLOCATE=false
if [[ $steps == *" sanitizers "* ]]; then
  # the smallest sweep case of every path of every kind of call
  # (GPU_CHECKS_SANITIZER_CASES=all: and of every dtype pair, which takes
  # longer than a call to the GPU machine may), over gpu_ops' kernels
  workload=(python3 tools/sanitizer_workload.py)
  [ "${GPU_CHECKS_SANITIZER_CASES:-few}" = all ] || workload+=(--few)
  sanitize "$out/compute_sanitizer.log" gpu_ops \
      "${GPU_CHECKS_SANITIZERS:-memcheck racecheck initcheck synccheck}" "${workload[@]}" ||
    sanitizer_status=1
fi
fp8_status=0
if [[ $steps == *" fp8 "* ]]; then
  python3 tools/fp8_matmul_hlo.py --out "$out/fp8_matmul.json" 2>&1 | tee "$out/fp8_matmul.log"
  fp8_status=${PIPESTATUS[0]}
fi
template_status=0
if [[ $steps == *" template "* ]]; then
  # The template as a reader uses it: a renamed copy built with nvcc and its
  # own tests, here on this GPU (tests/test_template.py, whose log counts
  # the book's tests of the template). Then the template built as its
  # README says: its own tests, each on a line of their own log, and its
  # handlers under memcheck and initcheck through its test of every dtype
  # and shape.
  python3 -m pytest -q -p no:cacheprovider $verbose tests/test_template.py 2>&1 |
    tee "$out/template.log"
  template_status=${PIPESTATUS[0]}
  site=$(mktemp -d)
  python3 -m pip install -q --no-build-isolation --no-deps --target "$site" \
      -Ccmake.define.CMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" ./template ||
    template_status=1
  (cd template && PYTHONPATH=$site python3 -P -m pytest -q -p no:cacheprovider $verbose tests) \
      2>&1 | tee "$out/template_own_tests.log"
  [ "${PIPESTATUS[0]}" = 0 ] || template_status=1
  (cd template && PYTHONPATH=$site sanitize "$out/template_sanitizer.log" my_ops \
     "memcheck initcheck" python3 -P -m pytest -q -p no:cacheprovider tests \
     -k test_forward_and_gradients_are_the_references) || template_status=1
fi
if [[ $steps == *" recipes "* ]]; then
  # The recipes' handlers, built with nvcc as their chapters build them, on
  # this GPU (tests/test_recipes.py), then under memcheck and initcheck.
  python3 -m pytest -q -p no:cacheprovider $verbose tests/test_recipes.py 2>&1 |
    tee "$out/recipes.log"
  recipes_status=${PIPESTATUS[0]}
  sanitize "$out/recipes_sanitizer.log" "" "memcheck initcheck" \
      python3 -m pytest -q -p no:cacheprovider tests/test_recipes.py || recipes_status=1
fi
sharding_status=0
if [[ $steps == *" sharding "* ]]; then
  python3 tools/sharding_hlo.py "$out/sharding_hlo.json" 2>&1 | tee "$out/sharding_hlo.log"
  sharding_status=${PIPESTATUS[0]}
fi
# The run's short summary (tools/gpu_checks_summary.py merges several runs
# into a machine's results file).
python3 tools/gpu_checks_summary.py --out "$out/summary.json" "$out"
echo "sweep: $sweep_status, properties: $properties_status, tests: $tests_status," \
  "chapters: $chapters_status, sanitizer: $sanitizer_status," \
  "fp8 matmul check: $fp8_status, sharding: $sharding_status, template: $template_status," \
  "recipes: $recipes_status"
exit $(( sweep_status || properties_status || tests_status || chapters_status ||
         sanitizer_status || fp8_status || sharding_status || template_status ||
         recipes_status ))
