"""The verifier registry: every (layout, type) repack accepts has a reader of the verifier's own,
and a layout module built here (registered, converted to, verified) needs no edit elsewhere."""

from __future__ import annotations

import re
import types

import numpy as np
import pytest
from click.testing import CliRunner

from panelpack import repack
from panelpack.cli import main
from panelpack.convert import convert
from panelpack.formats import blocks as codecs
from panelpack.formats import qtypes
from panelpack.formats.errors import UnsupportedError
from panelpack.verify import bundle_check, registry


# ---- coverage -------------------------------------------------------------------------------
def _uncovered() -> list[tuple[str, str]]:
    """(layout, type) pairs repack accepts whose bytes no verifier reader would read."""
    bad = []
    for (name, tname), paths in registry.coverage().items():
        t = qtypes.get(tname)
        readers = [p for p in paths if p != "lossless.sha256"]
        if not paths or (t.scheme is not None and not readers):
            bad.append((name, tname))
    return bad


def test_every_accepted_layout_and_type_has_a_verifier_path():
    cov = registry.coverage()
    want = {(name, t.name) for name, mod in repack.LAYOUTS.items() for t in mod.SOURCE_TYPES}
    assert set(cov) == want
    assert _uncovered() == []
    # the table has no row for a layout repack does not list
    assert set(registry.VERIFIERS) <= set(repack.LAYOUTS)
    # and what it names resolves: a compiled kernel or an interleaved form per advertised path
    for (name, tname), paths in cov.items():
        v = registry.verifier(name)
        t = qtypes.get(tname)
        assert any(p.startswith("compiled.") for p in paths) == (v.kernel_spec(t) is not None and not v.regions_are_blocks)
        assert ("il8.gemm" in paths) == (v.form(t) is not None)


def test_a_layout_without_a_reader_is_reported(monkeypatch):
    monkeypatch.setattr(repack, "LAYOUTS", dict(repack.LAYOUTS))
    repack.register(_reversed_layout("test-bare", hooks=()))
    assert _uncovered() == [("test-bare", "Q8_0")]
    assert registry.verifier("test-bare").origin == "none"


def test_register_refuses_duplicates_and_half_modules(monkeypatch):
    monkeypatch.setattr(repack, "LAYOUTS", dict(repack.LAYOUTS))
    with pytest.raises(ValueError, match="already registered"):
        repack.register(repack.get("panel64"))
    half = types.ModuleType("half")
    half.NAME = "half"
    with pytest.raises(TypeError, match="lacks SOURCE_TYPES"):
        repack.register(half)


def test_registry_and_the_compiled_table_agree():
    from panelpack.verify import compiled, il8

    assert set(compiled.KERNELS) == set(registry.compiled_kernels())
    assert set(il8.FORMS) == set(registry.interleaved_forms())
    # region names and sizes are the layout's own plan()
    for (name, tname), f in il8.FORMS.items():
        n, k = 32, 2 * max(f.unit, qtypes.get(tname).block_size)
        units = (n // 8) * (k // f.unit)
        assert {r.name: r.nbytes // units for r in repack.get(name).plan(tname, n, k)} == f.regions, (name, tname)
    assert registry.kernel_spec("panel65", "q4_0") is None
    with pytest.raises(UnsupportedError, match="no compiled kernel for layout 'panel65'"):
        compiled.spec("panel65", "q4_0")


# ---- a throwaway layout, all in this file ---------------------------------------------------
def _reversed_layout(name: str, hooks=("blocks", "integer_form"), swap_rows: bool = True) -> types.ModuleType:
    """A layout module of Q8_0 blocks, built here: rows stored last-first, each 34-byte block
    byte-reversed.

        region "rows" uint8 [N, row_bytes]:
            block b of stored row r, byte i = block b of source row N-1-r, byte 33-i
            (so a block reads [qs[31] .. qs[0]][d high byte][d low byte])

    ``swap_rows=False`` is a packer bug its own unpack undoes (so lossless still passes): the
    rows stay in source order. Only a reader of the documented bytes can tell.
    """
    mod = types.ModuleType(f"throwaway_{name.replace('-', '_')}")
    t = qtypes.Q8_0
    bs = t.type_size

    def refuse(qtype, n, k):
        q = qtypes.get(qtype)
        if q != t:
            return f"{name} holds Q8_0 only, not {q.name}"
        if n < 1 or k < 1 or k % t.block_size:
            return f"shape [{n}, {k}] is not whole Q8_0 rows"
        return None

    def plan(qtype, n, k):
        why = refuse(qtype, n, k)
        if why:
            raise UnsupportedError(f"layout {name}: {why}")
        return [repack.RegionSpec("rows", "uint8", (n, t.row_bytes(k)), n * t.row_bytes(k))]

    def _swap(x, n, k):  # an involution: pack and unpack are the same move
        x = np.asarray(x, np.uint8).reshape(n, k // t.block_size, bs)
        return np.ascontiguousarray((x[::-1] if swap_rows else x)[:, :, ::-1]).reshape(n, -1)

    def params(qtype, n, k):
        plan(qtype, n, k)
        return {"layout": name, "type": t.name, "n": n, "k": k, "invertible": True}

    def pack(blocks, n, k, qtype, out=None):
        plan(qtype, n, k)
        data = _swap(blocks, n, k)
        if out is None:
            return {"rows": data}
        np.copyto(out["rows"], data)
        return out

    def unpack(regions, n, k, qtype, out=None):
        plan(qtype, n, k)
        data = _swap(regions["rows"], n, k)
        if out is None:
            return data
        np.copyto(out, data)
        return out

    def dequantize(regions, n, k, qtype):
        return codecs.dequantize(unpack(regions, n, k, qtype), t, n, k).reshape(n, k)

    # the verifier hooks: read the documented bytes, by index arithmetic, not through _swap
    def read_blocks(regions, n, k, qtype):
        rows = np.asarray(regions["rows"]).reshape(n, k // t.block_size, bs)
        return rows[n - 1 - np.arange(n)][:, :, bs - 1 - np.arange(bs)].reshape(n, -1)

    def read_integer_form(regions, n, k, qtype):
        rows = np.asarray(regions["rows"]).reshape(n, k // t.block_size, bs)[::-1]
        c = rows[:, :, bs - 3::-1].view(np.int8).reshape(n, k).astype(np.int16)
        d = rows[:, :, bs - 1].astype(np.uint16) | (rows[:, :, bs - 2].astype(np.uint16) << 8)
        s = d.view(np.float16).astype(np.float32)
        return c, s, np.zeros_like(s)

    mod.__dict__.update(
        NAME=name, SOURCE_TYPES=frozenset({t}), ROW_MULTIPLE=1, TARGET={"isa": "test"},
        DESCRIPTION="Q8_0 rows reversed, blocks byte-reversed (a test layout)",
        refuse=refuse, invertible=lambda qtype: qtypes.get(qtype) == t, plan=plan, params=params, pack=pack,
        unpack=unpack, dequantize=dequantize,
    )
    known = {"blocks": read_blocks, "integer_form": read_integer_form}
    if hooks:
        mod.VERIFY = {h: known[h] for h in hooks}
    return mod


@pytest.fixture
def registered(monkeypatch):
    """Register layout modules for one test only."""
    monkeypatch.setattr(repack, "LAYOUTS", dict(repack.LAYOUTS))
    return repack.register


def _converted(tmp_path, tiny_hf, mod):
    res = convert(tiny_hf, tmp_path / f"{mod.NAME}.ppk", layout=mod.NAME, quant="q8_0")
    assert res.to_json()["layouts"].get(mod.NAME, 0) > 0
    return res.bundle


def test_throwaway_layout_converts_and_verifies_through_its_hooks(tmp_path, tiny_hf, registered):
    mod = registered(_reversed_layout("test-reversed"))
    rep = bundle_check.verify(_converted(tmp_path, tiny_hf, mod), level="all")
    assert rep.ok, rep.render()
    mine = [v for v in rep.tensors if v.layout == mod.NAME]
    assert mine
    for v in mine:
        assert v.verdict == "AGREE"
        assert v.paths == ["standard", "reader.test-reversed.blocks", "reader.test-reversed.integer_form"]
        assert v.levels == {"structure": "ok", "lossless": "ok", "agreement": "ok"}


def test_throwaway_layout_reader_catches_a_self_consistent_packer_bug(tmp_path, tiny_hf, registered):
    mod = registered(_reversed_layout("test-unswapped", swap_rows=False))
    rep = bundle_check.verify(_converted(tmp_path, tiny_hf, mod), level="all")
    assert not rep.ok
    v = next(v for v in rep.tensors if v.layout == mod.NAME)
    assert v.levels["lossless"] == "ok"  # unpack undoes the bug: only the reader sees it
    assert v.verdict == "MISMATCH" and any("reader.test-unswapped.blocks P" in p for p in v.problems)


def test_throwaway_layout_without_hooks_falls_back(tmp_path, tiny_hf, registered):
    mod = registered(_reversed_layout("test-plain", hooks=()))
    rep = bundle_check.verify(_converted(tmp_path, tiny_hf, mod), level="all")
    assert rep.ok, rep.render()
    v = next(v for v in rep.tensors if v.layout == mod.NAME)
    assert v.paths == ["standard"] and v.levels["lossless"] == "ok"
    assert v.levels["agreement"].startswith("ok (standard dispatch on the unpacked blocks only")


def test_cli_choices_come_from_the_registries(tmp_path, tiny_hf, registered):
    run = CliRunner().invoke
    registered(_reversed_layout("test-cli"))
    r = run(main, ["convert", "--help"])
    assert r.exit_code == 0
    for name in repack.LAYOUTS:
        assert name in r.output
    from panelpack.convert.cactus import QUANTS as CQ_QUANTS
    from panelpack.convert.mixes import MIXES
    from panelpack.convert.policy import QUANT_CHOICES

    flat = "".join(r.output.split())
    quant = next(c for c in re.findall(r"\[([a-z0-9_|]+)\]", flat) if "cq1" in c).split("|")  # --quant
    assert set(quant) == set(QUANT_CHOICES) | {m.lower() for m in MIXES} | set(CQ_QUANTS)
    assert f"[{'|'.join(QUANT_CHOICES)}]" in flat  # --requant
    assert f"[{'|'.join(bundle_check.LEVELS)}]" in run(main, ["verify", "--help"]).output
    r = run(main, ["convert", str(tiny_hf), "-o", str(tmp_path / "c.ppk"), "--layout", "TEST_CLI", "--quant", "Q8_0"])
    assert r.exit_code == 0, r.output
    r = run(main, ["verify", str(tmp_path / "c.ppk"), "--level", "lossless"])
    assert r.exit_code == 0, r.output
    r = run(main, ["convert", str(tiny_hf), "-o", str(tmp_path / "d.ppk"), "--layout", "panel32"])
    assert r.exit_code == 2 and "panel32" in r.output


def test_cli_targets_outtypes_references_and_kernel_paths_come_from_their_registries(monkeypatch):
    from panelpack import convert as convert_pkg
    from panelpack.convert import gguf_out
    from panelpack.verify.runtime import evaluate, weights

    run = CliRunner().invoke
    flat = "".join(run(main, ["convert", "--help"]).output.split())
    assert f"[{'|'.join(convert_pkg.TARGETS)}]" in flat and f"[{'|'.join(gguf_out.OUTTYPE_CHOICES)}]" in flat
    flat = "".join(run(main, ["eval", "--help"]).output.split())
    assert f"[{'|'.join(evaluate.REFERENCES)}]" in flat
    assert f"[{'|'.join(p for p in weights.KERNEL_PATHS if p != 'f32')}]" in flat  # f32 is a reference only
    # read when used, not copied at import: a path added to the registry is a choice at once
    monkeypatch.setattr(weights, "KERNEL_PATHS", (*weights.KERNEL_PATHS, "test-path"))
    assert "test-path" in run(main, ["generate", "--help"]).output
    r = run(main, ["eval", "nowhere.ppk", "--kernels", "nope"])
    assert r.exit_code == 2 and "test-path" in r.output


def test_layout_keyed_facts_are_columns_of_the_registry(monkeypatch):
    """The lossless row reader, the super-block-major flag and the runtime's stacking unit are
    columns of VERIFIERS (no table of their own elsewhere in verify/), and lossless reads through it."""
    import dataclasses

    from panelpack.verify import lossless
    from panelpack.verify.runtime import weights

    assert not hasattr(lossless, "READERS") and not hasattr(bundle_check, "_SUPERBLOCK_MAJOR")
    assert not hasattr(weights, "_STACKABLE")
    cols = {name: (v.row_reader is not None, v.superblock_major, v.stack_rows) for name, v in registry.VERIFIERS.items()}
    assert cols == {"rowmajor": (False, False, 1), "panel64": (True, True, repack.panel64.CHANNELS),
                    "ggml-x8": (False, False, None), "il8-nibble": (False, False, None), "il8-int8": (False, False, None),
                    "panel64-compact": (False, True, repack.panel64.CHANNELS)}
    assert registry.row_reader("nope") is None and registry.stack_rows("nope") is None

    calls = []

    class Spy(lossless.Panel64Reader):
        def rows(self, r0, r1, out=None):
            calls.append((r0, r1))
            return super().rows(r0, r1, out)

    monkeypatch.setitem(registry.VERIFIERS, "panel64", dataclasses.replace(registry.VERIFIERS["panel64"], row_reader=Spy))
    monkeypatch.setattr(lossless, "NUMPY_ELEMENTS", 0)
    t, n, k = qtypes.Q4_0, 128, 256
    blocks = codecs.quantize(np.random.default_rng(1).standard_normal((n, k)).astype(np.float32), t)
    lay = repack.get("panel64")
    regions = lay.pack(blocks, n, k, t)
    got = np.concatenate([w.copy() for _, _, w in lossless.dequantized_rows("panel64", regions, n, k, t)])
    assert calls and np.array_equal(got, lay.dequantize(regions, n, k, t))
