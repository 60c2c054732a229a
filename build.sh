#!/usr/bin/env bash
# Set up, build and test "JAX custom GPU operations".
#
#   ./build.sh            virtual environment + pinned dependencies, build and
#                         install gpu_ops, build the book
#   ./build.sh test       the same, then the whole test suite
#
# Options (after the command, or as environment variables):
#   --no-venv   (GPU_OPS_NO_VENV=1)  use the current Python environment, which
#               must already hold the dependencies; nothing is downloaded
#   GPU_OPS_SKIP_BOOK=1  no book build, nbval or book tests (for GPU machines
#               without jupyter-book; tools/gpu_checks.sh runs the chapters)
#   PYTHON=...      the Python (>= 3.12) to create .venv with
#   CUDA_ARCH=...   CUDA architectures to compile, e.g. "90" or "80-real;90"
#   GPU_OPS_APEX_SEED=1  also build the seed tutorial's kernels, the benchmarks'
#               baseline (benchmarks/apex_seed; not part of the package)
set -euo pipefail
cd "$(dirname "$0")"

command_name=build
no_venv=${GPU_OPS_NO_VENV:-0}
skip_book=${GPU_OPS_SKIP_BOOK:-0}  # GPU machines without jupyter-book (tools/gpu_checks.sh)
mathjax_version=3.2.2  # served with the book (tools/book_site.py)
for arg in "$@"; do
  case "$arg" in
    test) command_name=test ;;
    build) command_name=build ;;
    --no-venv) no_venv=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument '$arg' (see ./build.sh --help)" >&2; exit 2 ;;
  esac
done

current_step="starting"
step() { current_step="$1"; echo; echo "==> $1"; }
trap 'echo; echo "build.sh: FAILED during: ${current_step}" >&2' ERR

python_is_recent() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; }

find_python() {
  if [ -n "${PYTHON:-}" ]; then
    python_is_recent "$PYTHON" && { echo "$PYTHON"; return; }
    echo "build.sh: PYTHON=$PYTHON is not Python >= 3.12" >&2; return 1
  fi
  local candidate
  for candidate in python3.12 python3.13 python3 \
      "$(pyenv root 2>/dev/null)"/versions/3.1[2-9]*/bin/python3; do
    if command -v "$candidate" >/dev/null 2>&1 && python_is_recent "$candidate"; then
      echo "$candidate"; return
    fi
  done
  echo "build.sh: no Python >= 3.12 found; set PYTHON=/path/to/python3.12" >&2
  return 1
}

if [ "$no_venv" = 1 ]; then
  step "Using the current Python environment (no virtual environment, no downloads)"
  python=$(command -v python3)
  python_is_recent "$python" || { echo "build.sh: $python is older than 3.12" >&2; exit 1; }
else
  step "Creating the virtual environment .venv"
  if [ ! -x .venv/bin/python ]; then
    base_python=$(find_python)
    "$base_python" -m venv .venv
  fi
  python=.venv/bin/python
  step "Installing pinned dependencies (requirements.txt)"
  "$python" -m pip install --quiet --upgrade pip
  "$python" -m pip install --quiet -r requirements.txt
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    step "NVIDIA GPU found: installing JAX's CUDA 13 plugin"
    jax_version=$(grep '^jax==' requirements.txt | cut -d= -f3)
    "$python" -m pip install --quiet "jax[cuda13]==${jax_version}"
  fi
fi
"$python" -c 'import jax, sys; print(f"Python {sys.version.split()[0]}, JAX {jax.__version__}, devices: {jax.devices()}")'

step "Building and installing gpu_ops"
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake_defines=()
[ -n "${CUDA_ARCH:-}" ] && cmake_defines+=("-Ccmake.define.CMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH}")
[ "${GPU_OPS_APEX_SEED:-0}" = 1 ] && cmake_defines+=("-Ccmake.define.GPU_OPS_APEX_SEED=ON")
[ "$command_name" = test ] && cmake_defines+=("-Ccmake.define.GPU_OPS_WARNINGS_AS_ERRORS=ON")
mkdir -p build
build_log=build/gpu_ops_build.log
if ! "$python" -m pip install --verbose --no-build-isolation --no-deps --editable . \
    -Cbuild.verbose=true "${cmake_defines[@]}" >"$build_log" 2>&1; then
  tail -n 40 "$build_log"; echo "(full log: $build_log)"
  false
fi
grep -E "gpu_ops: |warning:" "$build_log" || true
"$python" -c 'import gpu_ops; print("gpu_ops built; CUDA kernels compiled in:", gpu_ops.CUDA_COMPILED)'

if [ "$skip_book" = 1 ]; then
  step "Skipping the book and its tests (GPU_OPS_SKIP_BOOK=1)"
else
  if [ ! -f build/mathjax/mathjax/es5/tex-chtml.js ]; then
    if [ "$no_venv" = 0 ] && command -v npm >/dev/null 2>&1; then
      step "Fetching MathJax ${mathjax_version} (npm), so that the book renders maths offline"
      rm -rf build/mathjax && mkdir -p build/mathjax/mathjax
      (cd build/mathjax && npm pack --silent "mathjax@${mathjax_version}" >/dev/null &&
        tar -xzf "mathjax-${mathjax_version}.tgz" && mv package/es5 mathjax/es5 &&
        rm -rf package "mathjax-${mathjax_version}.tgz")
    else
      echo "build.sh: no MathJax in build/mathjax (needs npm): the book loads it from its CDN"
    fi
  fi
  step "Building the book (HTML, offline, warnings are errors)"
  rm -rf _build/html  # no page of an earlier build survives (Sphinx rewrites every page)
  "$python" -c 'import sys; from jupyter_book.cli.main import main; sys.exit(main())' \
    build . --warningiserror --keep-going --quiet
  echo "The book is at $(pwd)/_build/html/index.html"
fi

find_browser() {
  local candidate
  for candidate in chromium chromium-browser google-chrome google-chrome-stable; do
    command -v "$candidate" >/dev/null 2>&1 && return 0
  done
  return 1
}

if [ "$command_name" = test ] && [ "$skip_book" != 1 ] && ! find_browser; then
  if [ "$no_venv" = 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    step "Installing Debian's chromium for the site's browser test"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "build.sh: no Chromium, and no root apt-get to install it: the browser test will fail"
  fi
fi

if [ "$command_name" = test ]; then
  step "Running the test suite"
  if [ "$skip_book" = 1 ]; then
    "$python" -m pytest -q -m "not book"
  else
    "$python" -m pytest -q
    step "Running the multi-device tests again on meshes of 2 devices (a 2-GPU machine's)"
    GPU_OPS_CPU_DEVICES=2 "$python" -m pytest -q -p no:cacheprovider tests/test_sharding.py \
      tests/test_float8.py tests/test_from_fp8.py tests/test_residual.py \
      -k "shard or mesh or devices or partition"
    step "Re-executing every chapter and comparing its outputs (nbval)"
    "$python" -m pytest -q -p no:cacheprovider --nbval chapters \
      --nbval-sanitize-with chapters/nbval_sanitize.cfg
  fi
fi
current_step="done"
echo
echo "build.sh: all steps succeeded"
