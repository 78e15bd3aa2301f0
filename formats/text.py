"""Plain-text rendering shared by every command's report: sizes and aligned tables."""

from __future__ import annotations

from typing import Any, Collection, Sequence


def human_bytes(n: float) -> str:
    """``512 B``, ``1.5 KiB``, ``86.7 MiB``, ``1.2 GiB`` (binary units)."""
    if n < 1024:
        return f"{n:.0f} B"
    x = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        x /= 1024
        if x < 1024 or unit == "TiB":
            return f"{x:.1f} {unit}"
    raise AssertionError("unreachable")


def table_lines(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Collection[int] = (),
                indent: str = "", rule: bool = False) -> list[str]:
    """Aligned columns (``right``: indices of right-aligned columns); ``rule`` adds a dashed line."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        return (indent + "  ".join(parts)).rstrip()

    out = [line(cells[0])]
    if rule:
        out.append(indent + "  ".join("-" * w for w in widths))
    return out + [line(r) for r in cells[1:]]


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], right: Collection[int] = ()) -> str:
    """A ruled table as one string."""
    return "\n".join(table_lines(headers, rows, right, rule=True))
