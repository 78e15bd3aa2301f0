"""panel64's code-form option (repack.CODE_FORMS, issue 26): ``--layout panel64`` writes the
5/6/2/3-bit types as panel64-compact and the rest as panel64; ``panel64:int8`` keeps panel64's
int8 panels; the option is per output on every surface (CLI, multi-target, batch plans, API),
recorded in the manifest, and each tensor's ledger says which form it got."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from panelpack import repack
from panelpack.cli import main
from panelpack.convert import Target, convert, convert_many
from panelpack.convert.batch_plan import load
from panelpack.formats import qtypes
from panelpack.formats.bundle import open_bundle
from panelpack.formats.errors import UnsupportedError
from panelpack.repack import panel64_compact as PC

from builders import tiny_llama_gguf

COMPACT = sorted(PC.COMPACT_TYPES, key=lambda t: t.id)
OTHERS = sorted(repack.get("panel64").SOURCE_TYPES - PC.COMPACT_TYPES, key=lambda t: t.id)


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("forms") / "tiny.gguf"
    tiny_llama_gguf(p)
    return p


def test_requests_and_the_layout_each_type_gets():
    assert repack.request("panel64") == repack.Request("panel64", "compact")
    assert repack.request(" Panel64:INT8 ") == repack.Request("panel64", "int8")
    assert str(repack.request("panel64:compact")) == "panel64:compact"
    assert repack.request("panel64-compact") == repack.Request("panel64-compact")  # the layout itself
    assert repack.request("ggml_x8") == repack.Request("ggml-x8")
    for t in COMPACT:
        assert repack.written("panel64", t) == "panel64-compact"
        assert repack.written("panel64:int8", t) == "panel64"
        assert repack.written("panel64-compact", t) == "panel64-compact"
    for t in OTHERS + [qtypes.F32, qtypes.F16]:
        assert repack.written("panel64", t) == repack.written("panel64:int8", t) == "panel64"
    assert repack.written("il8-nibble", qtypes.Q4_0) == "il8-nibble"
    with pytest.raises(UnsupportedError, match=r"unknown code form 'nibble'.*panel64:compact, panel64:int8"):
        repack.request("panel64:nibble")
    with pytest.raises(UnsupportedError, match="'ggml-x8' has no code-form option"):
        repack.request("ggml-x8:int8")
    with pytest.raises(UnsupportedError, match="unknown layout"):
        repack.request("panel99:int8")
    assert {"panel64:compact", "panel64:int8"} <= set(repack.choices()) and repack.names() == list(repack.LAYOUTS)
    doc = {d["name"]: d for d in repack.describe()}
    assert doc["panel64"]["code_forms"] == {"default": "compact",
                                            "forms": {"compact": "panel64-compact", "int8": "panel64"}}
    assert "code_forms" not in doc["ggml-x8"]


def _by_name(manifest: dict) -> dict:
    return {t["name"]: t for t in manifest["tensors"]}


def test_default_is_compact_int8_selectable_and_recorded(tmp_path, src):
    a = convert(src, tmp_path / "a.ppk")  # the default: panel64, compact forms
    b = convert(src, tmp_path / "b.ppk", layout="panel64:int8")
    ma, mb = open_bundle(a.bundle).manifest, open_bundle(b.bundle).manifest
    assert ma["options"]["layout"] == mb["options"]["layout"] == "panel64"
    assert (ma["options"]["code_form"], mb["options"]["code_form"]) == ("compact", "int8")
    ta, tb = _by_name(ma), _by_name(mb)
    seen = set()
    for name, t in ta.items():
        typ = qtypes.get(t["type"])
        if t["layout"] == "rowmajor":
            assert tb[name]["layout"] == "rowmajor" and t["ledger"]["reason"]  # fallbacks unchanged
            continue
        seen.add(typ)
        want = "panel64-compact" if typ in PC.COMPACT_TYPES else "panel64"
        assert t["layout"] == t["ledger"]["written"] == t["ledger"]["requested"] == want, name
        assert tb[name]["layout"] == tb[name]["ledger"]["requested"] == "panel64", name
        assert t["ledger"]["code_form"] == ("compact" if typ in PC.COMPACT_TYPES else tb[name]["ledger"]["code_form"])
        assert tb[name]["ledger"]["code_form"] in ("int8", "nibble")
        if typ not in PC.COMPACT_TYPES:  # the same bytes in both bundles
            assert (a.bundle / t["file"]).read_bytes() == (b.bundle / tb[name]["file"]).read_bytes()
    assert seen & PC.COMPACT_TYPES and seen - PC.COMPACT_TYPES
    assert len(a.plan.fallbacks()) == len(b.plan.fallbacks())
    assert a.plan.bytes_out < b.plan.bytes_out
    text = a.render()
    assert "code forms: compact: " in text and "requested layout 'panel64:compact'" in text
    assert next(ln for ln in text.splitlines() if ln.startswith("blk.1.attn_v.weight")).split()[3:5] == \
        ["panel64-compact", "compact"]
    # the explicit default is the same bundle
    c = convert(src, tmp_path / "c.ppk", layout="panel64:compact")
    assert json.loads((c.bundle / "manifest.json").read_text())["tensors"] == ma["tensors"]


def test_per_output_in_a_multi_target_convert_and_the_cli(tmp_path, src):
    runs = convert_many(src, [Target(tmp_path / "m1.ppk"), Target(tmp_path / "m2.ppk", layout="panel64:int8")])
    forms = [open_bundle(r.bundle).manifest["options"]["code_form"] for r in runs]
    assert forms == ["compact", "int8"]
    alone = convert(src, tmp_path / "alone.ppk", layout="panel64:int8")
    m1, m2 = (json.loads((b / "manifest.json").read_text()) for b in (runs[1].bundle, alone.bundle))
    assert [t["layout"] for t in m1["tensors"]] == [t["layout"] for t in m2["tensors"]]
    for t1, t2 in zip(m1["tensors"], m2["tensors"]):  # byte-identical to its own convert
        assert (runs[1].bundle / t1["file"]).read_bytes() == (alone.bundle / t2["file"]).read_bytes()
    r = CliRunner().invoke(main, ["convert", str(src), "-o", str(tmp_path / "x1.ppk"), "-o", str(tmp_path / "x2.ppk"),
                                  "--layout", "panel64:int8", "--json"])
    assert r.exit_code == 0, r.output
    docs = json.loads(r.output)["targets"]
    assert [d["code_form"] for d in docs] == ["compact", "int8"]
    r = CliRunner().invoke(main, ["convert", str(src), "--dry-run", "--layout", "panel64:bits"])
    assert r.exit_code == 2 and "panel64:int8" in r.output


def test_a_batch_target_takes_the_option(tmp_path, src):
    plan = tmp_path / "plan.toml"
    plan.write_text(f'[[target]]\nlayout = "panel64"\n[[target]]\nlayout = "panel64:int8"\nout = "{{name}}-int8.ppk"\n'
                    f'[[source]]\npath = "{src}"\nname = "tiny"\n')
    job = load(plan).jobs[0]
    assert [t.layout for t in job.targets] == ["panel64", "panel64:int8"]
    runs = convert_many(src, [Target(t.out, layout=t.layout) for t in job.targets])
    assert [open_bundle(r.bundle).manifest["options"]["code_form"] for r in runs] == ["compact", "int8"]


def test_a_batch_default_out_name_has_no_colon(tmp_path, src):
    plan = tmp_path / "plan.toml"
    plan.write_text(f'[[target]]\nlayout = "panel64:int8"\n[[target]]\nlayout = "panel64"\n'
                    f'[[source]]\npath = "{src}"\nname = "tiny"\n')
    outs = [Path(t.out).name for t in load(plan).jobs[0].targets]
    assert outs == ["tiny.panel64-int8.ppk", "tiny.panel64.ppk"]
