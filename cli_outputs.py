"""``panelpack convert SRC -o a.ppk --layout panel64 -o b.ppk --layout ggml-x8``: several outputs
of one read, each with its own options (docs/CONVERT.md, "Several outputs from one read").

The rule, so a pairing is never a guess: with two or more ``-o``, a per-output option
(:data:`PER_OUTPUT`) written after an ``-o`` belongs to that output (the nearest ``-o`` before
it); one written before the first ``-o`` is the default of every output that does not give its
own. Each output may give each of them once. Every other option is the run's, wherever it
stands. With a single ``-o`` nothing changes: options may stand anywhere, as always.
"""

from __future__ import annotations

from typing import Any

import click

#: the options each output of a multi-output convert may give for itself (click parameter names)
PER_OUTPUT = ("layout", "quant", "requant", "digest")
#: where :class:`MultiOutputCommand` leaves the outputs it split off: ``[{"out": path, "opts": {name: raw}}]``
META_KEY = "panelpack.outputs"
OUT_PARAM = "out"


def _option_table(cmd: click.Command) -> tuple[dict[str, click.Option], set[str]]:
    """Every spelling of every option -> its parameter, and the spellings that take a value."""
    spell: dict[str, click.Option] = {}
    takes: set[str] = set()
    for p in cmd.params:
        if not isinstance(p, click.Option):
            continue
        for o in [*p.opts, *p.secondary_opts]:
            spell[o] = p
            if not (p.is_flag or p.count):
                takes.add(o)
    return spell, takes


def split_outputs(cmd: click.Command, args: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """(the outputs with their own options, the remaining arguments). Fewer than two ``-o``:
    no outputs and the arguments unchanged."""
    spell, takes = _option_table(cmd)
    outputs: list[dict[str, Any]] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            rest.extend(args[i:])
            break
        if a.startswith("--") and "=" in a:
            name, inline = a.split("=", 1)
        elif a.startswith("-") and not a.startswith("--") and len(a) > 2 and a[:2] in takes:
            name, inline = a[:2], a[2:]  # -oPATH
        else:
            name, inline = a, None
        p = spell.get(name)
        if p is None or name not in takes:
            rest.append(a)
            i += 1
            continue
        if inline is None:
            if i + 1 >= len(args):
                rest.append(a)  # click names the missing value
                i += 1
                continue
            value, i = args[i + 1], i + 2
        else:
            value, i = inline, i + 1
        if p.name == OUT_PARAM:
            outputs.append({"out": value, "opts": {}, "flag": name})
        elif p.name in PER_OUTPUT and outputs:
            own = outputs[-1]["opts"]
            if p.name in own:
                raise click.UsageError(f"{name} given twice for the output {outputs[-1]['out']}")
            own[p.name] = value
        else:
            rest.extend([name, value])
    if len(outputs) < 2:
        return [], list(args)
    return outputs, rest


class MultiOutputCommand(click.Command):
    """A command whose ``-o`` may repeat, each with its own :data:`PER_OUTPUT` options."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        outputs, rest = split_outputs(self, list(args))
        if outputs:
            ctx.meta[META_KEY] = outputs
        return super().parse_args(ctx, rest)


def resolve(ctx: click.Context, outputs: list[dict[str, Any]], defaults: dict[str, Any]) -> list[dict[str, Any]]:
    """Each output's options as typed values: its own (checked by the option's click type, as on
    the command line), else ``defaults`` (the run's parsed value of that option)."""
    params = {p.name: p for p in ctx.command.params}
    out = []
    for o in outputs:
        row: dict[str, Any] = {"out": o["out"]}
        for name in PER_OUTPUT:
            if name in o["opts"]:
                row[name] = params[name].type_cast_value(ctx, o["opts"][name])
            else:
                row[name] = defaults.get(name)
        out.append(row)
    return out
