#!/usr/bin/env bash
# Download into .whl/ the Python packages that tools/gpu_checks.sh needs on a
# GPU machine beyond its own JAX, CUDA and pytest: hypothesis for the property
# test, pytest-xdist for the test suite in several processes, and for nbval
# over the chapters jupytext, nbclient, nbval, ipykernel and myst-nb (chapter
# 8 glues its numbers into the text). Versions follow
# requirements.txt; the wheels are for CPython 3.12 on x86-64 Linux, as the
# GPU machines run. Run it where pip can reach the package index.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 \
    manylinux2014_x86_64 manylinux1_x86_64 linux_x86_64 any; do
  platforms+=(--platform "$tag")
done
rm -rf .whl
"$python" -m pip download --quiet --only-binary=:all: --python-version 3.12 \
  --implementation cp "${platforms[@]}" --constraint requirements.txt --dest .whl \
  hypothesis pytest-xdist jupytext nbclient nbval ipykernel myst-nb
echo "$(ls .whl | wc -l) wheels in .whl/ ($(du -sh .whl | cut -f1))"
