"""What a runtime does with a bundle: map a tensor's regions in place and run a matmul on them.

    python examples/read_bundle.py BUNDLE.ppk [tensor-name]

The regions are read-only memory maps of the tensor file (no copy); the ZT0 table and the
geometry come from the manifest. The matmul here is panelpack's compiled reference kernel,
which computes exactly what an SME2 or NEON kernel on the same bytes computes.
"""

from __future__ import annotations

import sys

import numpy as np

from panelpack.formats.bundle import Bundle
from panelpack.verify import compiled


def main(path: str, name: str | None) -> None:
    b = Bundle(path)
    t = b.tensor(name) if name else next(x for x in b.tensors if x.layout == "panel64")
    n, k = t.nk
    regions = b.regions(t)  # name -> np.memmap view, typed and shaped as the manifest says
    print(f"{t.name}: {t.type} [{n}, {k}] in {t.layout}, file {t.file}")
    for rname, r in regions.items():
        print(f"  region {rname:7s} {str(r.dtype):7s} {list(r.shape)}  offset {t.regions[rname].offset}")
    if "zt0" in t.params:
        print("  ZT0:", bytes(t.params["zt0"][:16]).hex(" "), "...")
    x = np.random.default_rng(0).standard_normal((1, k)).astype(np.float32)
    y = compiled.matmul(t.layout, regions, n, k, t.qtype, x)
    print(f"  y = W·x: {y.shape}, first values {np.round(y[0, :4], 4).tolist()}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
