"""Compare two GGUF files the way the GGUF-out tests require: the same key/value pairs (byte for
byte, in the same order; only the ``general.*`` provenance keys of convert/gguf_out.py may differ),
the same tensor table (names, order, shapes, types, offsets) and the same tensor bytes."""

from __future__ import annotations

from pathlib import Path

from panelpack.convert.gguf_out import is_provenance
from panelpack.formats.gguf import GGUFFile


def differences(ours: str | Path, ref: str | Path) -> list[str]:
    """Everything that differs, in words (empty: the files agree)."""
    a, b = GGUFFile(ours), GGUFFile(ref)
    out: list[str] = []
    ka = [k for k in a.kv_infos if not is_provenance(k)]
    kb = [k for k in b.kv_infos if not is_provenance(k)]
    if ka != kb:
        out.append(f"keys differ: only ours {sorted(set(ka) - set(kb))}, only llama.cpp's {sorted(set(kb) - set(ka))}, "
                   f"order ours {ka} / theirs {kb}" if set(ka) == set(kb) else
                   f"keys differ: only ours {sorted(set(ka) - set(kb))}, only llama.cpp's {sorted(set(kb) - set(ka))}")
    for k in ka:
        if k in b.kv_infos and bytes(a.kv_bytes(k)) != bytes(b.kv_bytes(k)):
            va, vb = a.metadata[k], b.metadata[k]
            if hasattr(va, "tolist") and hasattr(vb, "tolist"):
                la, lb = va.tolist(), vb.tolist()
                first = next((i for i, (x, y) in enumerate(zip(la, lb)) if x != y), min(len(la), len(lb)))
                out.append(f"{k}: {len(la)} vs {len(lb)} items, first difference at {first}: "
                           f"{la[first:first + 3]!r} vs {lb[first:first + 3]!r}")
            else:
                out.append(f"{k}: {str(va)[:120]!r} vs {str(vb)[:120]!r}")
    ta = [(r.name, r.ne, r.type.name, r.rel_offset) for r in a.tensor_records]
    tb = [(r.name, r.ne, r.type.name, r.rel_offset) for r in b.tensor_records]
    if ta != tb:
        diff = [(x, y) for x, y in zip(ta, tb) if x != y]
        out.append(f"tensor tables differ ({len(ta)} vs {len(tb)} tensors), e.g. {diff[:3]}")
    bad = [t.name for t in a.tensors if t.name in {r.name for r in b.tensor_records}
           and bytes(a.raw(t.name)) != bytes(b.raw(t.name))]
    if bad:
        out.append(f"{len(bad)} tensors' bytes differ, e.g. {bad[:5]}")
    return out
