"""The front door: ``import panelpack`` is cheap and offers the pipeline's functions; every
result renders itself; the manifest is typed."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import panelpack
from panelpack.formats.bundle import Region, TensorEntry

from builders import build_gguf, random_blocks


def test_import_is_cheap():
    code = "import sys, panelpack; print(sorted(m for m in ('numpy', 'numba', 'click') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_front_door_names():
    import importlib
    import pkgutil

    # every submodule loaded first: none may shadow a front-door name (panelpack.convert.gguf_export)
    for pkg in ("panelpack.convert", "panelpack.formats", "panelpack.repack"):
        for m in pkgutil.iter_modules(importlib.import_module(pkg).__path__):
            importlib.import_module(f"{pkg}.{m.name}")
    for name in ("convert", "plan", "verify", "export", "open_checkpoint", "open_bundle", "layouts"):
        assert callable(getattr(panelpack, name)), name
        assert name in dir(panelpack)
    for name in ("convert", "plan", "export"):
        assert callable(getattr(panelpack.convert, name)), name
    assert [d["name"] for d in panelpack.layouts()][:2] == ["rowmajor", "panel64"]


def test_every_all_name_exists():
    """``from panelpack.X import *`` works for every module: each name a module's ``__all__``
    lists is defined there, once (a renamed function must leave the list too)."""
    import importlib
    import pkgutil

    names = ["panelpack"] + [m.name for m in pkgutil.walk_packages(panelpack.__path__, "panelpack.")]
    assert "panelpack.formats.gguf" in names and "panelpack.verify.runtime" in names  # the walk saw the tree
    listed, missing = 0, []
    for name in names:
        mod = importlib.import_module(name)
        exported = getattr(mod, "__all__", None)
        if exported is None:
            continue
        assert all(isinstance(n, str) for n in exported) and len(set(exported)) == len(exported), name
        listed += 1
        missing += [f"{name}.{n}" for n in exported if not hasattr(mod, n)]
    assert not missing, f"__all__ lists names the module does not define: {missing}"
    assert listed >= 9  # the modules that declare one today (cli, the packages, gguf, safetensors, ...)


@pytest.mark.slow
def test_pipeline_through_the_front_door(tmp_path):
    rng = np.random.default_rng(3)
    src = tmp_path / "m.gguf"
    build_gguf(src, {"blk.0.ffn_up.weight": ("Q4_0", random_blocks("Q4_0", 64, 256, rng)),
                     "blk.0.attn_norm.weight": ("F32", rng.standard_normal(256).astype(np.float32))},
               {"general.name": "m"})
    plan = panelpack.plan(src)
    assert [t.name for t in plan.tensors] == ["blk.0.ffn_up.weight", "blk.0.attn_norm.weight"]
    res = panelpack.convert(src, tmp_path / "m.ppk")
    assert "blk.0.ffn_up.weight" in res.render() and json.loads(json.dumps(res.to_json()))["bundle"]
    rep = panelpack.verify(tmp_path / "m.ppk", level="lossless")
    assert rep.ok and "verify OK" in rep.render() and rep.to_json()["ok"] is True
    exp = panelpack.export(tmp_path / "m.ppk", tmp_path / "back.gguf")
    assert exp.identical and "byte-identical" in exp.render()
    assert (tmp_path / "back.gguf").read_bytes() == src.read_bytes()
    b = panelpack.open_bundle(tmp_path / "m.ppk")
    t = b.tensor("blk.0.ffn_up.weight")
    assert isinstance(t, TensorEntry) and t.layout == "panel64" and t.nk == (64, 256)
    assert all(isinstance(r, Region) and r.offset % 64 == 0 for r in t.regions.values())
    with panelpack.open_checkpoint(src) as ck:
        assert ck.tensor("blk.0.ffn_up.weight").shape == (64, 256)


def test_manifest_json_round_trips_through_the_typed_entries(tmp_path):
    rng = np.random.default_rng(4)
    src = tmp_path / "m.gguf"
    build_gguf(src, {"w": ("Q8_0", random_blocks("Q8_0", 8, 64, rng))}, {"general.name": "m"})
    panelpack.convert(src, tmp_path / "m.ppk", layout="rowmajor")
    raw = json.loads((tmp_path / "m.ppk" / "manifest.json").read_text())
    b = panelpack.open_bundle(tmp_path / "m.ppk")
    assert [t.to_json() for t in b.tensors] == raw["tensors"]
    assert list(raw["tensors"][0]) == ["name", "shape", "source_type", "type", "role", "action", "layout", "file",
                                       "bytes", "regions", "params", "source_blake3", "blocks_blake3",
                                       "ledger"]


def test_convert_writes_the_digest_it_is_asked_for(tmp_path):
    from panelpack.formats.errors import BadInputError

    rng = np.random.default_rng(5)
    src = tmp_path / "m.gguf"
    build_gguf(src, {"w": ("Q4_0", random_blocks("Q4_0", 64, 256, rng))}, {"general.name": "m"})
    panelpack.convert(src, tmp_path / "s.ppk", digest="sha256")
    b = panelpack.open_bundle(tmp_path / "s.ppk")
    t = b.tensors[0].to_json()
    assert b.manifest["digest"] == "sha256" and {"source_sha256", "blocks_sha256"} <= set(t)
    assert not {"blake3", "sha256"} & set(t) and all("sha256" in r for r in t["regions"].values())
    with pytest.raises(BadInputError, match="unknown digest 'md5'"):
        panelpack.convert(src, tmp_path / "x.ppk", digest="md5")
    assert not (tmp_path / "x.ppk").exists()
