"""Instruction-level differential test: panelpack's SME2 emulator (verify/sme2.py) against QEMU's
SME2, one instruction at a time on random register contents (sign extremes and predication
included): LUTI4 (two registers, .B/.H/.S, every index), LD1RQB, SDOT (4-way, vgx4, indexed),
SMOPA (4-way, 32-bit), and the ZA reads (MOVA array vgx4, MOVA tile slice, ST1W tile slice).

The instructions run in ``tests/native/isa_diff.c`` (built with the native leaves' toolchain,
run under qemu-aarch64 -cpu max,sme512=on); every case must give the emulator's bytes exactly.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from panelpack.verify import sme2
from panelpack.verify.native import toolchain as tc

from native_tools import ISA_DIFF, require_qemu_build

CASES = 10_000
ZA = 64 * 64
EXTREMES = np.array([-128, -127, -1, 0, 1, 126, 127], np.int8).view(np.uint8)


def _bytes(rng, shape) -> np.ndarray:
    """Random bytes, a third of them sign extremes (-128, -127, -1, 0, 1, 126, 127)."""
    x = rng.integers(0, 256, size=shape, dtype=np.uint8)
    pick = rng.random(shape) < 0.33
    x[pick] = rng.choice(EXTREMES, size=int(pick.sum()))
    return x


def _preds(rng, cases: int) -> np.ndarray:
    """Predicate rows (one 0/1 byte per bit): all, none, a prefix (WHILELT-like) or random."""
    p = (rng.random((cases, 64)) < 0.5).astype(np.uint8)
    kind = rng.integers(0, 4, cases)
    p[kind == 0] = 1
    p[kind == 1] = 0
    pre = kind == 2
    p[pre] = (np.arange(64)[None, :] < rng.integers(0, 65, int(pre.sum()))[:, None]).astype(np.uint8)
    return p


def _run(kind: str, records: np.ndarray, out_bytes: int, tmp_path) -> np.ndarray:
    exe, qemu = require_qemu_build()
    src, dst = tmp_path / f"{kind}.in", tmp_path / f"{kind}.out"
    np.ascontiguousarray(records).tofile(src)
    subprocess.run([qemu, "-cpu", tc.QEMU_CPU, str(exe), kind, str(src), str(dst)], check=True, timeout=900)
    out = np.fromfile(dst, np.uint8)
    assert out.size == records.shape[0] * out_bytes
    return out.reshape(records.shape[0], out_bytes)


def _first_diff(got, want, what):
    bad = np.argwhere(got != want)
    assert bad.size == 0, f"{what}: {len(np.unique(bad[:, 0]))} of {got.shape[0]} cases differ, first case {bad[0, 0]}"


pytestmark = [pytest.mark.slow, pytest.mark.skipif(ISA_DIFF is None, reason="no tests/native/isa_diff.c")]


def test_luti4_two_registers_every_element_size_and_index(tmp_path):
    rng = np.random.default_rng(1)
    zt0, zn = _bytes(rng, (CASES, 64)), _bytes(rng, (CASES, 64))
    code = rng.integers(0, 3, CASES).astype(np.uint8)  # .B, .H, .S
    idx = (rng.integers(0, 4, CASES) % np.array([2, 2, 4])[code]).astype(np.uint8)
    got = _run("luti4", np.concatenate([zt0, zn, code[:, None], idx[:, None]], axis=1), 128, tmp_path)
    want = np.zeros_like(got)
    st = sme2.new_state()
    for i in range(CASES):
        st.ZT0[:] = zt0[i]
        st.Z[8] = zn[i]
        sme2.luti4_x2(st.Z, 0, st.ZT0, 8, int(idx[i]), 8 << int(code[i]))
        want[i] = st.Z[0:2].reshape(-1)
    _first_diff(got, want, "LUTI4")


def test_ld1rqb_replicates_with_predication(tmp_path):
    rng = np.random.default_rng(2)
    mem, pg = _bytes(rng, (CASES, 16)), _preds(rng, CASES)[:, :16]
    got = _run("ld1rqb", np.concatenate([mem, pg], axis=1), 64, tmp_path)
    want = np.zeros_like(got)
    st = sme2.new_state()
    for i in range(CASES):
        st.P[1] = 0
        st.P[1, :16] = pg[i]
        sme2.ld1rqb(st.Z, 3, np.ascontiguousarray(mem[i]), 0, st.P, 1)
        want[i] = st.Z[3]
    _first_diff(got, want, "LD1RQB")


def test_sdot_vgx4_indexed_accumulates_into_za(tmp_path):
    rng = np.random.default_rng(3)
    n = CASES
    za, z = _bytes(rng, (n, ZA)), _bytes(rng, (n, 5 * 64))
    wv = rng.integers(0, 32, n).astype("<u4")  # (wv + 0) MOD 16: the slot wraps
    idx = rng.integers(0, 4, n).astype(np.uint8)
    rec = np.concatenate([za, z, wv.view(np.uint8).reshape(n, 4), idx[:, None]], axis=1)
    got = _run("sdot", rec, ZA, tmp_path)
    want = np.zeros_like(got)
    st = sme2.new_state()
    for i in range(n):
        st.ZA[:] = za[i].reshape(64, 64)
        st.Z[4:9] = z[i].reshape(5, 64)
        sme2.sdot_za_vgx4_indexed(st.ZA, int(wv[i]), 0, st.Z, 4, 8, int(idx[i]))
        want[i] = st.ZA.reshape(-1)
    _first_diff(got, want, "SDOT vgx4")


def test_smopa_predicates_act_per_byte(tmp_path):
    rng = np.random.default_rng(4)
    n = CASES
    za, z, pn, pm = _bytes(rng, (n, ZA)), _bytes(rng, (n, 128)), _preds(rng, n), _preds(rng, n)
    tile = rng.integers(0, 4, n).astype(np.uint8)
    got = _run("smopa", np.concatenate([za, z, pn, pm, tile[:, None]], axis=1), ZA, tmp_path)
    want = np.zeros_like(got)
    st = sme2.new_state()
    for i in range(n):
        st.ZA[:] = za[i].reshape(64, 64)
        st.Z[0:2] = z[i].reshape(2, 64)
        st.P[2], st.P[3] = pn[i], pm[i]
        sme2.smopa_s_4way(st.ZA, int(tile[i]), st.Z, 0, 1, st.P, 2, 3)
        want[i] = st.ZA.reshape(-1)
    _first_diff(got, want, "SMOPA")


def test_za_array_and_tile_reads(tmp_path):
    rng = np.random.default_rng(5)
    n = CASES
    za = _bytes(rng, (n, ZA))
    wv, sl = rng.integers(0, 32, n).astype("<u4"), rng.integers(0, 32, n).astype("<u4")
    tile = rng.integers(0, 4, n).astype(np.uint8)
    pg, zd, mem = _preds(rng, n), _bytes(rng, (n, 64)), _bytes(rng, (n, 64))
    rec = np.concatenate([za, wv.view(np.uint8).reshape(n, 4), sl.view(np.uint8).reshape(n, 4), tile[:, None], pg, zd, mem],
                         axis=1)
    got = _run("zaread", rec, 6 * 64, tmp_path)
    want = np.zeros_like(got)
    st = sme2.new_state()
    for i in range(n):
        st.ZA[:] = za[i].reshape(64, 64)
        sme2.mova_za_to_z_vgx4(st.Z, 4, st.ZA, int(wv[i]), 0)
        st.P[1] = pg[i]
        out_mem = mem[i].copy()
        sme2.st1w_za_h(st.ZA, int(tile[i]), int(sl[i]) % 16, out_mem, 0, st.P, 1)
        st.Z[9] = zd[i]
        sme2.mova_tile_to_z_h(st.Z, 9, st.P, 1, st.ZA, int(tile[i]), int(sl[i]) % 16)
        want[i] = np.concatenate([st.Z[4:8].reshape(-1), out_mem, st.Z[9]])
    _first_diff(got, want, "ZA reads")
