"""The CQ codec and cactus tensor files without the peer: kernels against references, golden
values recorded from torch/cactus, bit layouts, hostile headers. (The live comparison with
cactus-compute is tests/test_cq_oracle.py.)"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from panelpack.formats import cactus, cq
from panelpack.formats.errors import BadInputError

# recorded from torch 2.13: Generator().manual_seed(1234 + 17*128); randint(0,2,(128,)) twice; randperm(128)
TORCH_LEFT_BITS_16 = [0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1, 1, 1, 1]
TORCH_RIGHT_BITS_16 = [0, 0, 0, 1, 0, 1, 1, 0, 1, 0, 1, 0, 0, 0, 1, 0]
TORCH_PERM_16 = [120, 76, 121, 110, 25, 66, 41, 31, 70, 14, 2, 37, 125, 67, 52, 101]
# recorded from cactus-compute 2.2.2 make_codebook(128, 2) (float32 values)
CACTUS_CB_128_2 = [-0.13304027915000916, -0.03999366611242294, 0.03998441621661186, 0.13303236663341522]


def test_torch_generator_golden():
    left, right, perm = cq.hadamard_components(128, 1234)
    assert ((left[:16] + 1) // 2).tolist() == TORCH_LEFT_BITS_16
    assert ((right[:16] + 1) // 2).tolist() == TORCH_RIGHT_BITS_16
    assert perm[:16].tolist() == TORCH_PERM_16
    assert sorted(perm.tolist()) == list(range(128))
    assert left.dtype == np.int8 and perm.dtype == np.uint32


def test_codebook_golden_and_shape():
    assert cq.codebook(128, 2).tolist() == CACTUS_CB_128_2
    for b in cq.BITS:
        cb = cq.codebook(128, b)
        assert cb.shape == (1 << b,) and np.all(np.diff(cb) > 0) and np.all(np.abs(cb) < 1)
    with pytest.raises(BadInputError):
        cq.codebook(128, 5)


def test_rotation_is_orthogonal_and_fwht_matches_dense():
    r = cq.hadamard_rotation()
    assert np.abs(r @ r.T - np.eye(128)).max() < 1e-6
    assert np.array_equal(np.abs(cq.sylvester(4)), np.ones((4, 4)))
    o = cq.orthogonal_rotation(96)
    assert o.shape == (96, 96) and np.abs(o.astype(np.float64) @ o.T - np.eye(96)).max() < 5e-3
    assert np.array_equal(o, o.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("bits", cq.BITS)
@pytest.mark.parametrize("shape", [(1, 128), (5, 130), (64, 256), (33, 1000)])
def test_kernel_matches_reference(bits, shape, rng):
    w = (rng.standard_normal(shape) * 0.02).astype(np.float32)
    w[0, :3] = [0.0, 1.0, -2.0]
    a, ra = cq.quantize_hadamard(w, bits, return_rotated=True)
    b, rb = cq.quantize_hadamard_ref(w, bits, return_rotated=True)
    assert np.array_equal(a.indices, b.indices) and np.array_equal(a.norms.view(np.uint16), b.norms.view(np.uint16))
    assert np.array_equal(ra, rb)
    assert a.kp % 128 == 0 and a.k == shape[1]
    d = cq.dequantize(a)
    assert np.array_equal(d, cq.dequantize_ref(a))
    dense = (a.codebook()[a.indices].reshape(shape[0], -1, 128) @ cq.hadamard_rotation().T
             * a.norms.astype(np.float32)[:, :, None]).reshape(shape[0], -1)
    assert np.abs(dense - d).max() < 2e-6 * max(1.0, float(np.abs(d).max()))
    assert abs(cq.relative_rmse(w, d) - cq.relative_rmse_ref(w, d)) < 1e-9
    if shape[1] % 128 == 0:  # no padding: the rotation-invariance shortcut gives the same figure
        assert abs(cq.hadamard_relative_rmse(a) / cq.relative_rmse(w, d) - 1) < 1e-5
    # quality: CQ4 keeps ~10% relative RMSE on gaussian weights, each bit fewer roughly doubles it
    assert cq.relative_rmse(w, d) < {1: 0.7, 2: 0.4, 3: 0.22, 4: 0.12}[bits]


def test_norms_are_numpy_norms(rng):
    w = rng.standard_normal((50, 384)).astype(np.float32) * rng.uniform(1e-3, 10, (50, 1)).astype(np.float32)
    a = cq.quantize_hadamard(w, 4)
    want = np.stack([np.linalg.norm(w[:, g * 128:(g + 1) * 128], axis=1) for g in range(3)], axis=1)
    assert np.array_equal(a.norms, want.astype(np.float16))


def test_near_ties_mask():
    cb = np.array([-1.0, 0.0, 1.0], dtype=np.float32)
    v = np.array([0.5, 0.5 + 2e-6, -0.5 - 5e-7, 0.2], dtype=np.float32)
    assert cq.near_ties(v, cb, 1e-6).tolist() == [True, False, True, False]


@pytest.mark.parametrize("bits", cq.BITS)
def test_packings_round_trip(bits, rng):
    idx = rng.integers(0, 1 << bits, size=(8, 256), dtype=np.uint8)
    p = cactus.pack_lsb(idx, bits)
    assert p.shape == (8, 256 * bits // 8)
    assert np.array_equal(cactus.unpack_lsb(p, 8, 256, bits), idx)
    q = cactus.pack_interleaved(idx, 128, bits)
    assert q.size == 8 * 256 * bits // 8
    assert np.array_equal(cactus.unpack_interleaved(q, 8, 256, 128, bits), idx)


def test_bit_layouts_by_hand():
    idx = np.zeros((4, 128), dtype=np.uint8)
    idx[0, :8] = [1, 2, 3, 4, 5, 6, 7, 8]
    idx[1, 0] = 9
    assert cactus.pack_lsb(idx[:1, :8], 4).tolist() == [[0x21, 0x43, 0x65, 0x87]]
    il = cactus.pack_interleaved(idx, 128, 4)
    assert il[:8].tolist() == [0x51, 0x62, 0x73, 0x84, 0x09, 0, 0, 0]
    i3 = np.zeros((1, 8), dtype=np.uint8)
    i3[0] = [7, 0, 0, 0, 0, 0, 0, 1]
    assert cactus.pack_lsb(i3, 3).tolist() == [[0x07, 0x00, 0x20]]
    i2 = np.zeros((4, 128), dtype=np.uint8)
    i2[1, 4:8] = [1, 2, 3, 0]  # a = 1, row 1 -> byte a*4 + row
    assert cactus.pack_interleaved(i2, 128, 2)[5] == 1 | 2 << 2 | 3 << 4


def test_header_golden_bytes():
    h = cactus.header_bytes(cactus.FLAG_INTERLEAVED_4ROW, (8, 256), 6, 1024, 100, 128, 2, 8)
    assert len(h) == 96 and h[84:] == b"\0" * 12
    assert h[:84] == b"CACT" + struct.pack("<III", 4, 32, 2) + struct.pack("<QQQQ", 8, 256, 0, 0) + \
        struct.pack("<IQQIIQ", 6, 1024, 100, 128, 2, 8)


def test_file_layout_and_reader(tmp_path, rng):
    w = (rng.standard_normal((8, 256)) * 0.02).astype(np.float32)
    t = cq.quantize_hadamard(w, 3)
    for il in (False, True):
        data = cactus.cq_file_bytes(t, il)
        h = cactus.parse_header(data[:84])
        assert h.data_offset % 32 == 0 and len(data) == h.data_offset + h.data_bytes
        assert h.scales_bytes == 8 * 2 + 256 * 4 + 8 * 2 * 2 + 128 * 2 + 128 * 4
        p = tmp_path / f"x{int(il)}.weights"
        cactus.write_file(p, data)
        f = cactus.read(p)
        assert f.interleaved == il and f.lineage == cactus.LINEAGE_LEGACY and f.bits == 3
        assert np.array_equal(f.indices(), t.indices)
        m = f.metadata()
        if il:
            fct = cactus.codebook_factor(t.codebook())
            assert np.abs(m["codebook"].astype(np.float32)).max() == 127
            assert np.allclose(m["norms"].astype(np.float32), t.norms.astype(np.float32) * fct, rtol=2e-3)
        else:
            assert np.array_equal(m["norms"], t.norms)
        assert np.abs(f.dequantize() - cq.dequantize(t)).max() < 2e-3 * np.abs(w).max()  # f16 codebook


def test_reader_rejects_hostile_files(tmp_path, rng):
    t = cq.quantize_hadamard((rng.standard_normal((4, 128))).astype(np.float32), 4)
    good = cactus.cq_file_bytes(t, False)
    cases = {
        "magic": b"CACX" + good[4:],
        "short": good[:50],
        "truncated": good[:-1],
        "ndim": good[:12] + struct.pack("<I", 9) + good[16:],
        "precision": good[:48] + struct.pack("<I", 42) + good[52:],
        "groups": good[:72] + struct.pack("<I", 3) + good[76:],
        "alignment": good[:8] + struct.pack("<I", 33) + good[12:],
    }
    for name, data in cases.items():
        p = tmp_path / f"{name}.weights"
        p.write_bytes(data)
        with pytest.raises(BadInputError):
            cactus.read(p)
    # flag 1<<5 outside a .cq4p.weights file is the other lineage's "no rotation" bit
    p = tmp_path / "norot.weights"
    p.write_bytes(good[:4] + struct.pack("<I", cactus.FLAG_PANELS) + good[8:])
    with pytest.raises(BadInputError, match="no rotation"):
        cactus.read(p)


def test_orthogonal_quantize_and_file(tmp_path, rng):
    w = (rng.standard_normal((12, 96)) * 0.02).astype(np.float32)
    t = cq.quantize_orthogonal(w)
    assert t.group == 96 and t.norms.shape == (12, 1)
    d = cq.dequantize(t)
    assert cq.relative_rmse(w, d) < 0.15
    for il in (False, True):
        p = tmp_path / f"o{int(il)}.weights"
        cactus.write_file(p, cactus.cq_file_bytes(t, il))
        f = cactus.read(p)
        assert f.orthogonal and np.array_equal(f.indices(), t.indices)
        assert np.array_equal(f.metadata()["rotation"].astype(np.float32), t.matrix)
        assert np.abs(f.dequantize() - d).max() < 1e-3 * np.abs(w).max()


def test_bad_inputs():
    with pytest.raises(BadInputError):
        cq.quantize_hadamard(np.zeros((3,), np.float32), 4)
    with pytest.raises(BadInputError):
        cq.quantize_hadamard(np.zeros((3, 128), np.float32), 5)
    t = cq.quantize_hadamard(np.ones((3, 128), np.float32), 4)
    with pytest.raises(BadInputError):
        cactus.cq_file_bytes(t, True)  # N % 4 != 0
