# Steps shared by run_jax_level.sh and run_patch.sh (sourced; both run in the
# repository root of a GPU machine).

# build_gpu_ops LOG: builds and installs gpu_ops for sm_90 from the tree as it
# is, output to LOG; on failure prints LOG's end and returns 1. It builds from
# scratch: on a machine kept warm since another run, objects built from other
# sources can be newer than the files copied in, and would be reused.
build_gpu_ops() {
  rm -rf build
  if ! GPU_OPS_NO_VENV=1 GPU_OPS_SKIP_BOOK=1 CUDA_ARCH=90 ./build.sh > "$1" 2>&1; then
    tail -30 "$1"
    return 1
  fi
}

# without_log_noise: its input without JAX's and XLA's log lines.
without_log_noise() {
  grep -v "^WARNING\|^I0000\|^E0000"
}
