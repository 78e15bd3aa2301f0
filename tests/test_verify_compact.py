"""panel64-compact through the verifier: the compiled kernel and the closed-form reader give the
standard dispatch's integer partials and bit-identical outputs (M = 1, 16, 17, N not a multiple
of 64, every K the types allow); a GGUF converted to it verifies at every level and exports
byte for byte."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from panelpack.convert import convert
from panelpack.convert.gguf_export import export_gguf
from panelpack.formats import qtypes
from panelpack.repack import panel64_compact as PC
from panelpack.verify import bundle_check, registry
from panelpack.verify import compiled as C
from panelpack.verify import dispatch as D

from builders import random_blocks, tiny_llama_gguf
from kernel_checks import assert_fast_is_portable

COMPACT = ["Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q2_K", "Q3_K"]


def _same_bits(y, z):
    return y.shape == z.shape and np.array_equal(np.asarray(y, np.float32).view(np.uint32),
                                                  np.asarray(z, np.float32).view(np.uint32))


def _ks(qname):
    return (256, 768) if qtypes.get(qname).block_size == 256 else (32, 96, 256)


def _agreement(qname, rng, ns, ks):
    for n in ns:
        for k in ks:
            blocks = random_blocks(qname, n, k, rng)
            prep = C.prepare(PC.NAME, PC.pack_ref(blocks, n, k, qname), n, k, qname)
            for m in (1, 16, 17):
                x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 10, (m, 1))).astype(np.float32)
                a, _ = D.quantize_activations(x)
                P0, A0 = D.standard_partials(blocks, n, k, qname, a)
                P, A = prep.partials(a)
                assert np.array_equal(P, P0) and np.array_equal(A, A0), (qname, n, k, m)
                assert _same_bits(prep.matmul(x), D.standard_matmul(blocks, n, k, qname, x)), (qname, n, k, m)


@pytest.mark.parametrize("qname", COMPACT)
def test_compiled_kernel_matches_the_standard_dispatch(qname, rng):
    _agreement(qname, rng, (70,), _ks(qname)[:1])


@pytest.mark.slow
@pytest.mark.parametrize("qname", COMPACT)
def test_compiled_kernel_matches_the_standard_dispatch_every_shape(qname, rng):
    _agreement(qname, rng, (1, 70, 129), _ks(qname))


@pytest.mark.parametrize("qname", COMPACT)
def test_extreme_codes(qname, rng):
    # every weight at the lowest, then the highest code, activations at +-127: the int16 runs hold
    t = qtypes.get(qname)
    n, k = 70, 256
    from panelpack.formats import blocks as B

    for code in (0, (1 << t.code_bits) - 1):
        f = B.to_fields(random_blocks(t, n, k, rng), t, n, k)
        f["codes"] = np.full_like(f["codes"], code)
        blocks = B.from_fields(f, t, n, k)
        prep = C.prepare(PC.NAME, PC.pack(blocks, n, k, t), n, k, t)
        a = np.where(rng.random((17, k)) < 0.5, -127, 127).astype(np.int8)
        assert np.array_equal(prep.partials(a)[0], D.standard_partials(blocks, n, k, t, a)[0])


#: (type, instruction set): AVX-512 for every form in the fast tier, AVX2 for one form of each kind
#: of its dot there (LUTI4 nibbles and planes, LUTI2 crumbs), the rest in the slow tier
ISA_CASES = [pytest.param(q, isa, marks=() if isa == "avx512" or q in ("Q5_K", "Q2_K") else (pytest.mark.slow,))
             for q in COMPACT for isa in ("avx2", "avx512")]


@pytest.mark.parametrize("qname, isa", ISA_CASES)
def test_fast_and_portable_tiles_agree(qname, isa, rng):
    """The fast tiles == the portable column tile, bit for bit, codes at both ends of their
    range, activations at -128, one row and three: AVX2 (one row: the table dot on the records
    in place; several: the codes expanded once a group, vpmaddubsw) and AVX-512
    (every form: the records in lane order, vpdpbusd). The table picks AVX-512 where it runs."""
    from panelpack.formats import blocks as B
    from panelpack.verify import compact

    tiles = {"avx2": compact._AVX2_TILES, "avx512": compact._AVX512_TILES}[isa]
    if not tiles:
        pytest.skip(f"numba does not target {isa} here")
    n, k = 136, 512
    t = qtypes.get(qname)
    f = B.to_fields(random_blocks(qname, n, k, rng), t, n, k)
    f["codes"] = np.where(rng.random(f["codes"].shape) < 0.3, 0, (1 << t.code_bits) - 1).astype(f["codes"].dtype)
    blocks = B.from_fields(f, t, n, k)
    prep = C.prepare(PC.NAME, PC.pack(blocks, n, k, qname), n, k, qname)
    default = "avx512" if compact._AVX512_TILES else "avx2"
    assert prep.spec.path == f"compiled.panel64-compact.{default}"
    if isa != default:  # the other instruction set's spec, as the kernel table would build it there
        order = compact.activation_recipe(PC.form(t).base_bits, PC.form(t).planes, t.code_offset) if isa == "avx2" \
            else None
        prep = dataclasses.replace(prep, spec=dataclasses.replace(  # (code_max: unread by the fast tiles)
            prep.spec, kernel=tiles[t.code_bits], variant=isa, activations=order))
    assert prep.spec.kernel is tiles[t.code_bits]
    portable = dataclasses.replace(prep, spec=dataclasses.replace(prep.spec, kernel=compact._TILES[t.code_bits],
                                                                  activations=None))
    assert_fast_is_portable(prep, portable, blocks, n, k, qname, rng.standard_normal((3, k)))


def test_q6_k_tile_where_pdep_is_slow(monkeypatch, rng):
    """Q6_K's AVX2 tile where ``pdep`` is microcoded (_simd.SLOW_PDEP: Zen 1/2): one row, the
    same table dot; several, the planes OR-ed in bit by bit instead of by pdep's crumb tables;
    == the portable tile, one row and three."""
    from panelpack.formats import blocks as B
    from panelpack.verify import _simd, compact

    if not _simd.AVAILABLE:
        pytest.skip("numba does not target AVX2 here")
    monkeypatch.setattr(_simd, "FAST_PDEP", False)
    tile = compact._avx2_planes_tile(4, 2, 4)
    assert tile.py_func.__name__ == "tile_compact_avx2_4_2_4_bitwise"  # its own tile (and numba cache index)
    n, k, t = 72, 256, qtypes.get("Q6_K")
    f = B.to_fields(random_blocks("Q6_K", n, k, rng), t, n, k)
    f["codes"] = np.where(rng.random(f["codes"].shape) < 0.3, 0, (1 << t.code_bits) - 1).astype(f["codes"].dtype)
    blocks = B.from_fields(f, t, n, k)
    prep = C.prepare(PC.NAME, PC.pack(blocks, n, k, "Q6_K"), n, k, "Q6_K")
    fast = dataclasses.replace(prep, spec=dataclasses.replace(prep.spec, kernel=tile, variant="avx2",
                                                              activations=compact.activation_recipe(4, 2, 32)))
    portable = dataclasses.replace(prep, spec=dataclasses.replace(prep.spec, kernel=compact._TILES[6], activations=None))
    assert_fast_is_portable(fast, portable, blocks, n, k, "Q6_K", rng.standard_normal((3, k)))


def test_registry_rows():
    v = registry.verifier(PC.NAME)
    for name in COMPACT:
        paths = v.paths(name)
        assert paths[0].startswith("compiled.panel64-compact") and paths[1:] == ["reader.closed_form",
                                                                                  "sme2/neon compact leaves"], paths
    assert "sme2/neon leaves" in v.paths("Q4_K") and "sme2/neon leaves" in v.paths("Q8_0")
    assert registry.kernel_spec(PC.NAME, "Q4_K").kernel is registry.kernel_spec("panel64", "Q4_K").kernel


def test_closed_form_reader_catches_a_wrong_plane_bit(rng):
    from panelpack.verify import compact

    qname, n, k = "Q5_K", 70, 256
    blocks = random_blocks(qname, n, k, rng)
    reg = PC.pack(blocks, n, k, qname)
    a, da = D.quantize_activations(rng.standard_normal((1, k)).astype(np.float32))
    P0, A0 = D.standard_partials(blocks, n, k, qname, a)
    sample = registry.Sample(PC.NAME, reg, qtypes.get(qname), n, k, PC.params(qname, n, k), a, da, A0,
                             np.arange(2), np.arange(n), 512)
    ((path, P, _, rows),) = compact.integer_form_reader(sample)
    assert path == "reader.panel64-compact.closed_form" and np.array_equal(P, P0[:, rows])
    bad = dict(reg)
    bad["panels"] = reg["panels"].copy()
    f = PC.form(qname)
    bad["panels"][0, 0, f.kq * 32 * f.base_bits] ^= 1  # plane bit of channel 0, K 0
    ((_, P, _, _),) = compact.integer_form_reader(dataclasses.replace(sample, regions=bad))
    assert P[0, 0, 0] != P0[0, 0, 0] and np.array_equal(P[:, 1:], P0[:, 1:])


def sha(p) -> str:
    return hashlib.sha256(open(p, "rb").read()).hexdigest()


@pytest.mark.slow
@pytest.mark.parametrize("output_type", ["Q2_K", "Q3_K"])
def test_gguf_converts_verifies_and_exports_byte_for_byte(tmp_path, output_type):
    src = tmp_path / "tiny.gguf"
    tiny_llama_gguf(src, output_type=output_type)  # layers: Q5_0, Q5_1, Q5_K, Q6_K; output N = 100
    res = convert(src, tmp_path / "c.ppk", layout=PC.NAME)
    forms = {row["name"]: row for row in res.ledger}
    compact = [name for name, row in forms.items() if row["type"] in COMPACT]
    assert compact and all(forms[name]["written"] == PC.NAME for name in compact)
    # the ledger says which code form each tensor got
    assert {forms[name]["code_form"] for name in compact} == {"compact"}
    assert {row["code_form"] for row in forms.values() if row["type"] in ("Q4_0", "Q4_K")} == {"nibble"}
    assert forms["token_embd.weight"].get("code_form") in (None, "int8")
    rep = bundle_check.verify(res.bundle, level="all")
    assert rep.ok, rep.render()
    mine = [v for v in rep.tensors if v.layout == PC.NAME and v.type in COMPACT]
    assert {v.type for v in mine} == {"Q5_0", "Q5_1", "Q5_K", "Q6_K", output_type}
    for v in mine:
        assert v.verdict == "AGREE" and any(p.startswith("compiled.panel64-compact") for p in v.paths), v
        assert {"reader.panel64-compact.closed_form", "neon.compact"} <= set(v.paths), v.paths
        assert any(p.startswith("sme2.gemv.") for p in v.paths) and any(p.startswith("sme2.gemm.") for p in v.paths)
        assert v.levels == {"structure": "ok", "lossless": "ok", "agreement": "ok"}, v
    out = export_gguf(res.bundle, tmp_path / "back.gguf")
    assert out.identical and sha(tmp_path / "back.gguf") == sha(src)


# ---- the emulated SME2 instructions and leaves ----------------------------------------------
def test_luti2_four_registers_byte_form(rng):
    from panelpack.verify import sme2

    st = sme2.new_state()
    st.ZT0[:] = rng.integers(0, 256, 64, dtype=np.uint8)
    st.Z[16] = rng.integers(0, 256, 64, dtype=np.uint8)
    for idx in range(4):  # one segment at 8-bit elements: the index selects nothing
        sme2.luti2_x4(st.Z, 4, st.ZT0, 16, idx, 8)
        fields = (st.Z[16][:, None] >> (2 * np.arange(4))) & 3  # field 4j + i of byte j
        want = st.ZT0[4 * fields.reshape(-1)].reshape(4, 64)  # low byte of entry 0..3
        assert np.array_equal(st.Z[4:8], want)
    sme2.luti2_x4(st.Z, 16, st.ZT0, 16, 0, 8)  # Zn inside Zd: read before written
    assert np.array_equal(st.Z[16:20], want)


def test_neon_ld1r_ushl_cmtst_add(rng):
    from panelpack.verify import neon

    V = neon.new_vregs()
    mem = rng.integers(0, 256, 16, dtype=np.uint8)
    neon.ld1r(V, 1, mem, 5, 2)
    assert np.array_equal(V[1], np.tile(mem[5:7], 8))
    neon.ld1r(V, 2, mem, 3, 4)
    assert np.array_equal(V[2], np.tile(mem[3:7], 4))
    V[3] = rng.integers(0, 256, 16, dtype=np.uint8)
    V[4] = (np.arange(16) - 8).astype(np.int8).view(np.uint8)  # shifts -8 .. 7
    neon.ushl_16b(V, 5, 3, 4)
    sh = np.arange(16) - 8
    x = V[3].astype(np.int64)
    assert np.array_equal(V[5], np.where(sh >= 0, (x << np.maximum(sh, 0)) & 0xFF, x >> np.maximum(-sh, 0)))
    neon.cmtst_16b(V, 6, 3, 1)
    assert np.array_equal(V[6], np.where(V[3] & V[1], 0xFF, 0))
    neon.add_16b(V, 7, 3, 1)
    assert np.array_equal(V[7], (V[3].astype(np.int64) + V[1]) & 0xFF)


def test_ldr_p_and_predicated_add(rng):
    from panelpack.verify import sme2

    st = sme2.new_state()
    mem = rng.integers(0, 256, 16, dtype=np.uint8)
    sme2.ldr_p(st.P, 6, mem, 3)
    assert np.array_equal(st.P[6], np.unpackbits(mem[3:11], bitorder="little"))
    st.Z[1] = rng.integers(0, 256, 64, dtype=np.uint8)
    before = st.Z[1].copy()
    sme2.dup_imm_b(st.Z, 20, 0x30)
    assert (st.Z[20] == 0x30).all()
    sme2.add_b_pred(st.Z, 1, st.P, 6, 20)
    want = np.where(st.P[6] == 1, (before.astype(np.int64) + 0x30) & 0xFF, before)
    assert np.array_equal(st.Z[1], want)


@pytest.mark.parametrize("qname", COMPACT)
def test_emulated_leaves_match_the_standard_dispatch(qname, rng):
    from panelpack.verify import compact_leaves as L

    t = qtypes.get(qname)
    f = PC.form(t)
    n, k = 70, t.block_size * (1 if t.block_size == 256 else 3)
    blocks = random_blocks(qname, n, k, rng)
    reg = PC.pack(blocks, n, k, qname)
    zt0 = np.frombuffer(PC.zt0_table(t), np.uint8)
    for m, leaf in ((1, L.gemv_leaf), (17, L.gemm_leaf), (16, L.gemm_leaf), (1, L.neon_leaf), (2, L.neon_leaf)):
        a = rng.integers(-127, 128, (m, k), dtype=np.int8)
        P0, _ = D.standard_partials(blocks, n, k, qname, a)
        assert np.array_equal(leaf(reg["panels"], zt0, a, n, k, t.group, f.base_bits, f.planes), P0), (qname, m)
    # a wrong plane bit changes exactly that channel's partial
    bad = reg["panels"].copy()
    if f.planes:
        bad[0, 0, f.kq * 32 * f.base_bits] ^= 1
        a = np.ones((1, k), np.int8)
        P0, _ = D.standard_partials(blocks, n, k, qname, a)
        for leaf in (L.gemv_leaf, L.neon_leaf):
            P = leaf(bad, zt0, a, n, k, t.group, f.base_bits, f.planes)
            assert P[0, 0, 0] != P0[0, 0, 0] and np.array_equal(P[0, 1:], P0[0, 1:])


@pytest.mark.slow
@pytest.mark.parametrize("quant", ["q5_0", "q3_k"])
def test_runtime_eval_on_a_compact_bundle_is_bit_identical_to_standard(tmp_path, quant):
    from panelpack.convert.example import write_tiny_llama
    from panelpack.verify.runtime import Model
    from panelpack.verify.runtime.evaluate import evaluate

    src = write_tiny_llama(tmp_path / "hf")
    res = convert(src, tmp_path / "t.ppk", layout=PC.NAME, quant=quant)
    written = {row["type"] for row in res.ledger if row["written"] == PC.NAME}
    assert quant.upper() in written, written
    ids = [1, 17, 300, 42, 499, 3, 256, 128]
    m = Model.open(res.bundle, "compiled")
    assert any("compiled.panel64-compact" in p for p in m.paths())
    rep = evaluate(res.bundle, ids=ids, against="standard")
    assert rep.comparison.identical and rep.ok
