"""Plain-text rendering shared by every command's report: sizes and aligned tables."""

from __future__ import annotations

import re
from typing import Any, Collection, Sequence

#: characters that move the cursor, erase, recolour or reorder a terminal's text: C0 and C1
#: controls, DEL, Unicode's invisible format and bidirectional overrides, and lone surrogates (a
#: non-UTF-8 name or argument, which cannot even be printed). A name holding one could print a
#: fake "verify OK" line, or hide a character
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ud800-\udfff\ufeff]")
#: the same, less newline and tab: what a multi-line text of ours may keep
_CONTROL_IN_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ud800-\udfff\ufeff]")


def _escaped(m: re.Match) -> str:
    c = m.group()
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def escape(s: Any) -> str:
    """``s`` as one printable line: every control character (newline included) as an escape
    (``\\n``, ``\\x1b``, ``\\u202e``). Names and metadata from a file go through this (or
    :func:`table`, which calls it) before they reach a terminal."""
    return _CONTROL.sub(_escaped, str(s))


def escape_text(s: str) -> str:
    """A multi-line text of ours with every control character but newline and tab escaped: the
    last guard of the CLI, behind the per-field :func:`escape`."""
    return _CONTROL_IN_TEXT.sub(_escaped, s)


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
    cells = [[escape(c) for c in headers]] + [[escape(c) for c in r] for r in rows]
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
