"""Shared by the native tests: the C toolchain and QEMU, or a skip saying what is missing."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest

from panelpack.verify.native import toolchain as tc

_HERE = Path(__file__).resolve().parent
ISA_DIFF: Optional[Path] = _HERE / "native" / "isa_diff.c"
if not ISA_DIFF.is_file():
    ISA_DIFF = None


def require_qemu() -> str:
    try:
        return tc.find_qemu().path
    except tc.ToolMissing as e:
        pytest.skip(str(e))


def require_build(target: str) -> tc.Build:
    try:
        return tc.build(target)
    except tc.ToolMissing as e:
        pytest.skip(str(e))


def require_qemu_build() -> tuple[Path, str]:
    """(the instruction-level test program, qemu-aarch64)."""
    qemu = require_qemu()
    assert ISA_DIFF is not None
    try:
        return tc.build_program(ISA_DIFF).driver, qemu
    except tc.ToolMissing as e:
        pytest.skip(str(e))
