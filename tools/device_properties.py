"""Print the properties of each CUDA device that the book's performance pages lean on.

The number of SMs, the L2's size, shared memory and registers per SM: read
from the CUDA runtime (cudaDeviceGetAttribute through ctypes), so that a
GPU run's environment.txt records them rather than the text assuming them.
Usage: python3 tools/device_properties.py (on a machine with a CUDA GPU).
"""
import ctypes
import ctypes.util
import glob
import os
import site
import sys

# cudaDeviceAttr values (driver_types.h).
ATTRIBUTES = {
    "compute capability major": 75,
    "compute capability minor": 76,
    "multiprocessors": 16,
    "L2 cache bytes": 38,
    "max persisting L2 bytes": 108,
    "shared memory per SM bytes": 81,
    "shared memory per block (opt-in) bytes": 97,
    "registers per SM": 82,
    "memory bus width bits": 37,
}


def cuda_runtime():
    """The CUDA runtime library: the system's, or the one JAX's CUDA plugin brings."""
    candidates = [ctypes.util.find_library("cudart")]
    for root in [*site.getsitepackages(), site.getusersitepackages()]:
        # JAX's CUDA plugin: nvidia/cu13/lib (CUDA 13) or nvidia/cuda_runtime/lib (CUDA 12).
        candidates += sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", "libcudart.so*")))
    candidates += sorted(glob.glob("/usr/local/cuda/lib64/libcudart.so*"))
    for path in filter(None, candidates):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    sys.exit("device_properties.py: no CUDA runtime library (libcudart) found")


def main():
    cudart = cuda_runtime()
    count = ctypes.c_int()
    status = cudart.cudaGetDeviceCount(ctypes.byref(count))
    if status != 0:
        sys.exit(f"device_properties.py: cudaGetDeviceCount failed with CUDA error {status}")
    for device in range(count.value):
        values = {}
        for name, attribute in ATTRIBUTES.items():
            value = ctypes.c_int()
            status = cudart.cudaDeviceGetAttribute(ctypes.byref(value), attribute, device)
            values[name] = value.value if status == 0 else f"error {status}"
        print(f"device {device}: " + ", ".join(f"{name} {value}" for name, value in values.items()))


if __name__ == "__main__":
    main()
