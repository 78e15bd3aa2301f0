"""Convert a GGUF file into an SME2 panel bundle, verify it, and ship it.

    python examples/convert_gguf.py model.gguf [out.ppk]

Uses the library API directly (the ``panelpack`` command is a thin shell over the same calls).
"""

from __future__ import annotations

import sys
from pathlib import Path

from panelpack.convert import convert, export
from panelpack.formats import archive
from panelpack.verify import bundle_check


def main(src: str, out: str) -> int:
    # 1. plan first: no tensor data is read, so this is instant even for big models
    result = convert(src, None, layout="panel64", dry_run=True)
    print(f"plan: {len(result.plan.tensors)} tensors, layouts {result.plan.layout_counts()}")

    # 2. convert (streaming, atomic): the bundle appears under `out` only when complete
    result = convert(src, out, layout="panel64", force=True, jobs=2)
    for row in result.ledger:
        if row["reason"]:
            print(f"  {row['name']}: {row['written']} ({row['reason']})")
    print(f"wrote {result.bundle} in {result.seconds:.2f} s")

    # 3. prove it: structure, lossless round trip, SME2/NEON/compiled kernels agree
    report = bundle_check.verify(result.bundle, level="all")
    print(report.render().splitlines()[-1])
    if not report.ok:
        return 1

    # 4. the source GGUF comes back byte for byte
    back = export(result.bundle, Path(out).with_suffix(".roundtrip.gguf"), force=True)
    print(back.render())

    # 5. ship it as one deterministic file
    packed = archive.pack(result.bundle, str(out) + ".tar.zst", force=True)
    print(f"archive {packed.path}: {packed.bytes_out:,} bytes")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    src = sys.argv[1]
    sys.exit(main(src, sys.argv[2] if len(sys.argv) > 2 else Path(src).stem + ".ppk"))
