"""The C++ sources' layering, and the one list of FFI targets they share."""

import pathlib
import re

from gpu_ops import _native, ffi_targets

CSRC = pathlib.Path(__file__).parents[1] / "gpu_ops" / "csrc"


def test_the_kernels_and_the_planner_never_include_the_handlers_folder():
    # ffi/ (handlers, checks, the module) builds on kernels/ and plan/, not
    # the other way round
    for folder in ("kernels", "plan"):
        for source in (CSRC / folder).iterdir():
            includes = re.findall(r'#include "([^"]+)"', source.read_text())
            assert not [i for i in includes if i.startswith("ffi/")], source


def test_every_target_of_the_list_is_registered_on_every_platform():
    listed = re.findall(r'X\(\w+, "(gpu_ops_\w+)"', (CSRC / "ffi" / "ffi_targets.h").read_text())
    assert len(listed) == len(set(listed)) == 5
    platforms = _native.targets()
    assert set(platforms) == ({"cpu", "CUDA"} if ffi_targets.CUDA_COMPILED else {"cpu"})
    for targets in platforms.values():
        assert sorted(targets) == sorted(listed)
    named = {value for key, value in vars(ffi_targets).items() if key.endswith("_TARGET")}
    assert named == set(listed)  # the Python side names each, and no other
    assert sorted(_native.target_names().values()) == sorted(listed)
    python = (CSRC.parent / "ffi_targets.py").read_text()
    assert not [name for name in listed if name in python]  # looked up, not written again
