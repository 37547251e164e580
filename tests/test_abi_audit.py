"""The stable-ABI audit (ci/abi_audit.py): a classic build's extension imports libtorch's C++ ABI and is flagged,
a stable build's imports only the stable C shim and passes. The rule is tested on symbol lists, then on the
extension this suite runs against (whichever build it is)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
import torch

import visdet_ops
from ci import abi_audit

needs_binutils = pytest.mark.skipif(
    shutil.which("nm") is None or shutil.which("c++filt") is None, reason="needs nm and c++filt (binutils)"
)

# What libtorch exports: shim functions, torch's C++ API, and the C++ runtime instantiations it re-exports.
EXPORTS = {
    "aoti_torch_get_dim",
    "torch_call_dispatcher",
    "_ZN2at14RecordFunctionD1Ev",  # at::RecordFunction::~RecordFunction()
    "_ZN3c105ErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",  # c10::Error
    "_ZNSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEEC1Ev",  # std::ostringstream()
}


@needs_binutils
def test_stable_imports_pass():
    imported = ["aoti_torch_get_dim", "torch_call_dispatcher", "PyModule_Create2", "memcpy"]
    imported.append("_ZNSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEEC1Ev")
    from_torch, violations = abi_audit.classify(imported, EXPORTS)
    assert violations == []
    assert "torch_call_dispatcher" in from_torch and "memcpy" not in from_torch


@needs_binutils
def test_libtorch_cpp_symbols_are_flagged():
    imported = ["aoti_torch_get_dim", "_ZN2at14RecordFunctionD1Ev", next(s for s in EXPORTS if s.startswith("_ZN3c10"))]
    _, violations = abi_audit.classify(imported, EXPORTS)
    assert violations == sorted(imported[1:])


@needs_binutils
def test_the_loaded_extension():
    """A stable build passes the audit; a classic build is flagged (it links at::/c10:: C++ symbols)."""
    library = Path(importlib.util.find_spec("visdet_ops._C").origin)
    result = abi_audit.audit(library, Path(torch.__file__).parent / "lib")
    assert result.from_torch, f"{library.name} imports nothing from libtorch: is this the right extension?"
    if visdet_ops.BUILD_INFO.get("STABLE_ABI"):
        assert result.violations == [], f"unstable libtorch symbols in a stable build: {result.violations[:5]}"
    else:
        assert result.violations, "a classic build should import libtorch's C++ ABI"
