"""The C reference kernels for runtime authors (``verify/native/*.c``, one vendorable header
``panelpack.h``), built once per source hash and run against the standard dispatch.

``toolchain`` finds clang/QEMU/the host compiler and builds; ``session`` runs the driver and
reads back ``P`` and ``y``. ``panelpack verify BUNDLE --native [auto|qemu|host]`` is
``bundle_check.verify(..., native=MODE)``. docs/NATIVE.md has the toolchain recipe.
"""

from __future__ import annotations

from .session import KERNELS, MODES, NativeError, Session, not_requested, sample_rows
from .toolchain import SOURCE_DIR, ToolMissing, build, cache_dir

__all__ = ["KERNELS", "MODES", "NativeError", "Session", "SOURCE_DIR", "ToolMissing", "build", "cache_dir",
           "not_requested", "sample_rows"]
