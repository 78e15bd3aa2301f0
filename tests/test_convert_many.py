"""One read, several bundles: ``convert_many`` and ``convert SRC -o a --layout X -o b --layout Y``
write, for each output, the bytes its own single convert writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from panelpack import repack
from panelpack.cli import main
from panelpack.cli_outputs import split_outputs
from panelpack.convert import Target, convert, convert_many
from panelpack.formats.errors import BadInputError


def tree(path: Path) -> dict[str, bytes]:
    """Every file of a bundle, by relative path."""
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(Path(path).rglob("*")) if p.is_file()}


def assert_same_as_single(source, tmp_path: Path, targets: list[Target], **run) -> list:
    results = convert_many(source, targets, **run)
    (tmp_path / "alone").mkdir()
    for t, r in zip(targets, results):
        alone = tmp_path / "alone" / Path(t.out).name
        single = convert(source, alone, layout=t.layout, quant=t.quant, requant=t.requant, digest=t.digest,
                         **{k: v for k, v in run.items() if k != "jobs"})
        assert r.bundle == Path(t.out)
        a, b = tree(Path(t.out)), tree(single.bundle)
        assert sorted(a) == sorted(b)
        differ = [name for name in a if a[name] != b[name]]
        assert not differ, f"{t.out}: {differ}"
        assert [row["name"] for row in r.ledger] == [row["name"] for row in single.ledger]
    return results


def test_hf_targets_share_the_read_and_each_quantization(tmp_path, tiny_hf):
    targets = [Target(tmp_path / "a.ppk", "panel64", "q4_k"), Target(tmp_path / "b.ppk", "ggml-x8", "q4_k"),
               Target(tmp_path / "d.ppk", "panel64", "q8_0")]
    res = assert_same_as_single(tiny_hf, tmp_path, targets)
    q = "model.layers.0.self_attn.q_proj.weight"
    rows = [{row["name"]: row for row in r.ledger} for r in res]
    # Q4_K is made once for a and b; Q8_0 (d) shares only the read and the f32 copy
    assert rows[0][q]["shared"] == ["read", "source digest", "dequantize", "quantize Q4_K"]
    assert rows[1][q]["shared"] == rows[0][q]["shared"]
    assert rows[2][q]["shared"] == ["read", "source digest", "dequantize"]
    assert rows[0]["model.norm.weight"]["shared"] == ["read", "source digest"]
    assert "quantize Q4_K" in res[1].render() and "shared with the run's other targets" in res[1].render()


def test_gguf_targets_requant_and_digests(tmp_path, tiny_gguf):
    targets = [Target(tmp_path / "a.ppk", "panel64"), Target(tmp_path / "b.ppk", "il8-int8", requant="q4_0"),
               Target(tmp_path / "c.ppk", "ggml-x8", digest="sha256")]
    res = assert_same_as_single(tiny_gguf, tmp_path, targets)
    assert all("source digest" not in notes for notes in res[2].shared.values())  # sha256: its own
    assert json.loads((tmp_path / "c.ppk" / "manifest.json").read_text())["digest"] == "sha256"


def test_jobs_give_the_same_bytes(tmp_path, tiny_hf):
    targets = [Target(tmp_path / "a.ppk", "panel64", "Q4_K_M"), Target(tmp_path / "b.ppk", "ggml-x8", "Q4_K_M")]
    assert_same_as_single(tiny_hf, tmp_path, targets, jobs=2)


def test_a_failing_target_leaves_no_output(tmp_path, tiny_hf, monkeypatch):
    lay = repack.get("ggml-x8")

    def broken(*a, **k):
        raise RuntimeError("packer broke")

    monkeypatch.setattr(lay, "pack", broken)
    with pytest.raises(RuntimeError):
        convert_many(tiny_hf, [Target(tmp_path / "a.ppk", "panel64", "q4_k"), Target(tmp_path / "b.ppk", "ggml-x8", "q4_k")])
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither bundle, no temporary left


def test_targets_are_checked_before_reading(tmp_path, tiny_hf):
    with pytest.raises(BadInputError, match="same output"):
        convert_many(tiny_hf, [tmp_path / "a.ppk", {"out": tmp_path / "a.ppk", "layout": "ggml-x8"}])
    with pytest.raises(BadInputError, match="out .required."):
        convert_many(tiny_hf, [{"layout": "ggml-x8"}])
    with pytest.raises(BadInputError, match="bundles"):
        convert_many(tiny_hf, [tmp_path / "a.ppk", tmp_path / "b.gguf"])
    assert not list(tmp_path.iterdir())


def test_dry_run_plans_every_target(tiny_hf):
    res = convert_many(tiny_hf, [Target("x.ppk", "panel64", "q4_k"), Target("y.ppk", "ggml-x8", "q8_0")], dry_run=True)
    assert [r.plan.layout for r in res] == ["panel64", "ggml-x8"] and all(r.dry_run for r in res)


# -- the command line ---------------------------------------------------------------------
def _split(args):
    from panelpack.cli import convert as cmd

    return split_outputs(cmd, args)


def test_options_pair_with_the_nearest_o_before_them():
    outs, rest = _split(["src", "--quant", "q4_k", "-o", "a", "--layout", "ggml-x8", "-j", "2",
                         "--out=b", "--digest=sha256", "-oc", "--layout", "il8-nibble", "--quant", "q8_0"])
    assert [(o["out"], o["opts"]) for o in outs] == [
        ("a", {"layout": "ggml-x8"}), ("b", {"digest": "sha256"}), ("c", {"layout": "il8-nibble", "quant": "q8_0"})]
    assert rest == ["src", "--quant", "q4_k", "-j", "2"]
    # one -o: the arguments as given (options anywhere, as before)
    assert _split(["src", "-o", "a", "--layout", "ggml-x8"]) == ([], ["src", "-o", "a", "--layout", "ggml-x8"])


def test_cli_multi_output(tmp_path, tiny_hf):
    r = CliRunner().invoke(main, ["convert", str(tiny_hf), "--quant", "q4_k", "-o", str(tmp_path / "a.ppk"),
                                  "-o", str(tmp_path / "b.ppk"), "--layout", "ggml-x8", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [t["layout"] for t in doc["targets"]] == ["panel64", "ggml-x8"]
    assert [t["quant"] for t in doc["targets"]] == ["Q4_K", "Q4_K"]
    single = convert(tiny_hf, tmp_path / "alone.ppk", layout="ggml-x8", quant="q4_k")
    assert tree(tmp_path / "b.ppk") == tree(single.bundle)


@pytest.mark.parametrize("args, message", [
    (["-o", "A", "--layout", "ggml-x8", "--layout", "panel64", "-o", "B"], "--layout given twice for the output"),
    (["-o", "A", "-o", "B", "--layout", "nope"], "nope"),
    (["-o", "A", "-o", "B.gguf"], "bundles only"),
    (["-o", "A", "-o", "B", "--target", "cactus"], "bundles only"),
])
def test_cli_multi_output_usage_errors(tmp_path, tiny_hf, args, message):
    args = [a.replace("A", str(tmp_path / "a.ppk")).replace("B", str(tmp_path / "b")) if a in ("A", "B", "B.gguf") else a
            for a in args]
    r = CliRunner().invoke(main, ["convert", str(tiny_hf), "--quant", "q4_k", *args])
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_smollm2_multi_target(tmp_path, smollm2):
    targets = [Target(tmp_path / "a.ppk", "panel64"), Target(tmp_path / "b.ppk", "ggml-x8", requant="q4_0"),
               Target(tmp_path / "c.ppk", "il8-nibble", requant="q4_0")]
    res = assert_same_as_single(smollm2, tmp_path, targets)
    assert any("quantize Q4_0" in notes for notes in res[1].shared.values())


@pytest.mark.slow
def test_gemma_multi_target(tmp_path, gemma):
    # the Q4_K_M mix keeps Gemma's types (copied blocks); x8 and il8 re-quantize the rest to Q4_0 once
    targets = [Target(tmp_path / "a.ppk", "panel64", "Q4_K_M"), Target(tmp_path / "b.ppk", "ggml-x8", requant="q4_0"),
               Target(tmp_path / "c.ppk", "il8-nibble", requant="q4_0")]
    res = assert_same_as_single(gemma, tmp_path, targets)
    assert any("quantize Q4_0" in notes for notes in res[2].shared.values())
