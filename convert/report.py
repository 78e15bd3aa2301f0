"""Text rendering of conversion results: the ledger table and the summary."""

from __future__ import annotations

from typing import Any

from ..formats.text import human_bytes, table


def render_ledger(ledger: list[dict[str, Any]]) -> str:
    rows = []
    for row in ledger:
        err = row.get("error")
        note = "; ".join(x for x in (row.get("rule"), row["reason"]) if x)
        if err:
            rel = err.get("rel_rms")
            note = (note + "; " if note else "") + ("quantization error rel_rms=" + (f"{rel:.3g}" if rel is not None else "n/a"))
            if err.get("warning"):
                note += f"; WARNING: {err['warning']}"
        shape = "x".join(str(d) for d in row["shape"])
        typ = row["source_type"] if row["source_type"] == row["type"] else f"{row['source_type']}->{row['type']}"
        rows.append((row["name"], shape, typ, row["written"], row.get("code_form") or "", human_bytes(row["bytes"]),
                     note))
    return table(rows, ("tensor", "shape", "type", "layout", "form", "bytes", "ledger"), right=(5,))


def render_result(result) -> str:
    plan = result.plan
    out = [render_ledger(result.ledger), ""]
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(plan.layout_counts().items()))
    # counted from the ledger's written layout: a re-quantized tensor in the requested layout
    # has a reason but is no fallback
    fb = sum(1 for row in result.ledger if row["written"] != row["requested"])
    warned = [row["name"] for row in result.ledger if (row.get("error") or {}).get("warning")]
    if result.dry_run:
        out.append(f"dry run: {len(plan.tensors)} tensors planned, nothing read or written")
    else:
        rate = plan.bytes_in / result.seconds if result.seconds else 0.0
        out.append(f"wrote {result.bundle} in {result.seconds:.2f} s ({human_bytes(rate)}/s of source)")
    asked = f"{plan.layout}:{plan.code_form}" if plan.code_form else plan.layout
    out.append(f"bytes in {human_bytes(plan.bytes_in)}, out {human_bytes(plan.bytes_out)}; "
               f"layouts: {counts}; {fb} tensor(s) not in the requested layout '{asked}' (see ledger)")
    forms: dict[str, int] = {}
    for row in result.ledger:
        if row.get("code_form"):
            forms[row["code_form"]] = forms.get(row["code_form"], 0) + 1
    if forms:
        out.append("code forms: " + ", ".join(f"{k}: {v}" for k, v in sorted(forms.items())))
    shared = [row["shared"] for row in result.ledger if row.get("shared")]
    if shared:
        kinds = sorted({s for notes in shared for s in notes})
        out.append(f"shared with the run's other targets: {', '.join(f'{k} ({sum(k in n for n in shared)} tensors)' for k in kinds)}")
    if warned:
        shown = ", ".join(warned[:5]) + (f", ... and {len(warned) - 5} more" if len(warned) > 5 else "")
        out.append(f"WARNING: {len(warned)} tensor(s) quantized badly (see the ledger's WARNING): {shown}")
    return "\n".join(out)


def render_gguf_ledger(ledger: list[dict[str, Any]]) -> str:
    """A GGUF plan's ledger: each tensor's GGUF name, its source, its type and why."""
    rows = []
    for row in ledger:
        typ = row["source_type"] if row["source_type"] == row["type"] else f"{row['source_type']}->{row['type']}"
        note = "; ".join(x for x in (row.get("rule"), row.get("reason")) if x)
        src = row["source"] if row["source"] != row["name"] else ""
        rows.append((row["name"], src, "x".join(str(d) for d in row["shape"]), typ, note))
    return table(rows, ("tensor", "from", "shape", "type", "ledger"))


def render_gguf(result) -> str:
    plan = result.plan
    out = [render_gguf_ledger(plan.ledger()), ""]
    what = f"mix {plan.mix}" if plan.mix else (f"--outtype {plan.outtype}" if plan.outtype else "as stored")
    if result.path is None:
        out.append(f"dry run: {len(plan.tensors)} tensors, {len(plan.kv)} key/values planned ({what}), "
                   f"{human_bytes(plan.bytes_out)}; nothing written")
    else:
        out.append(f"wrote {result.path}: {plan.arch}, {len(plan.tensors)} tensors, {len(plan.kv)} key/values "
                   f"({what}), {human_bytes(result.bytes)} in {result.seconds:.2f} s")
    out.extend(f"WARNING: {w}" for w in plan.warnings)
    return "\n".join(out)
