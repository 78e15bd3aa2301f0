"""ggml-x8: byte for byte what llama.cpp's CPU backend builds at load time (block_q4_0x8 and
block_q4_Kx8 with an 8-byte interleave, ``ggml/src/ggml-cpu/repack.cpp``)."""

from __future__ import annotations

import numpy as np
import pytest

from panelpack.formats import blocks as B
from panelpack.repack import _ggml_x8_kernels as K
from panelpack.repack import ggml_x8 as X

from builders import random_blocks


def h(s: str) -> bytes:
    return bytes.fromhex(s)


# ---- golden bytes, written out by hand -------------------------------------------------------
def test_golden_q4_0_x8():
    # row r: d = 0x3c00 + r, qs[i] = 16 r + i. block_q4_0x8 = d[0..7], then 16 runs of 8 bytes:
    # run (h, r) = row r's qs[8h .. 8h+7] ^ 0x88.
    rows = [bytes([r, 0x3C]) + bytes(16 * r + i for i in range(16)) for r in range(8)]
    raw = np.frombuffer(b"".join(rows), np.uint8).reshape(8, 18)
    want = (
        h("003c 013c 023c 033c 043c 053c 063c 073c")
        + h("88898a8b8c8d8e8f 98999a9b9c9d9e9f a8a9aaabacadaeaf b8b9babbbcbdbebf")
        + h("c8c9cacbcccdcecf d8d9dadbdcdddedf e8e9eaebecedeeef f8f9fafbfcfdfeff")
        + h("8081828384858687 9091929394959697 a0a1a2a3a4a5a6a7 b0b1b2b3b4b5b6b7")
        + h("c0c1c2c3c4c5c6c7 d0d1d2d3d4d5d6d7 e0e1e2e3e4e5e6e7 f0f1f2f3f4f5f6f7")
    )
    got = X.pack(raw, 8, 32, "Q4_0")["blocks"]
    assert got.tobytes() == want
    assert np.array_equal(X.unpack({"blocks": got}, 8, 32, "Q4_0"), raw)


def test_golden_q4_k_x8_scale_group():
    # Sub-block 5 of row r has sc_r = 0, 17, 34, 51, 4, 21, 38, 55 and m_r = 63 - sc_r; every
    # other sub-block 0. Group 5 (bytes 32 + 60 .. 32 + 71) packs them with the 12-byte rule,
    # the rows in the 8 slots (computed by hand):
    #   r<4: sc_r | (sc_{r+4} >> 4) << 6  -> 00 51 a2 f3
    #        m_r  | (m_{r+4}  >> 4) << 6  -> ff ae 5d 0c
    #        sc_{r+4} & 15 | (m_{r+4} & 15) << 4 -> b4 a5 96 87
    rng = np.random.default_rng(0)
    n, k = 8, 256
    f = B.to_fields(random_blocks("Q4_K", n, k, rng), "Q4_K", n, k)
    sc = np.array([0, 17, 34, 51, 4, 21, 38, 55], np.uint8)
    f["sc"][:] = 0
    f["m"][:] = 0
    f["sc"][:, 5] = sc
    f["m"][:, 5] = 63 - sc
    raw = B.from_fields(f, "Q4_K", n, k)
    blk = X.pack(raw, n, k, "Q4_K")["blocks"].reshape(1152)
    scales = blk[32:128].tobytes()
    assert scales[60:72] == h("0051a2f3 ffae5d0c b4a59687")
    assert scales[:60] == bytes(60) and scales[72:] == bytes(24)
    assert blk[:16].tobytes() == raw[:, 0:2].tobytes() and blk[16:32].tobytes() == raw[:, 2:4].tobytes()


# ---- llama.cpp itself: ggml's CPU_REPACK buffer type (libggml-python's libggml-cpu.so) ---------
def _ggml_cpu_repack():
    """A function raw -> the bytes ggml's CPU backend stores after repacking a 2-D tensor, or
    None when libggml-python (or its CPU repack buffer type) is not available."""
    import ctypes
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("libggml")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0])
    libdir = next((root / d for d in ("lib64", "lib") if (root / d / "libggml-cpu.so").is_file()), None)
    if libdir is None:
        return None
    base = ctypes.CDLL(str(libdir / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(str(libdir / "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
    buft_fn = getattr(cpu, "_Z35ggml_backend_cpu_repack_buffer_typev", None)  # C++ symbol
    if buft_fn is None:
        return None

    class InitParams(ctypes.Structure):  # ggml.h: struct ggml_init_params
        _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]

    vp = ctypes.c_void_p
    base.ggml_init.restype, base.ggml_init.argtypes = vp, [InitParams]
    base.ggml_new_tensor_2d.restype = vp
    base.ggml_new_tensor_2d.argtypes = [vp, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    base.ggml_get_data.restype, base.ggml_get_data.argtypes = vp, [vp]
    base.ggml_backend_alloc_ctx_tensors_from_buft.restype = vp
    base.ggml_backend_alloc_ctx_tensors_from_buft.argtypes = [vp, vp]
    base.ggml_backend_tensor_set.argtypes = [vp, vp, ctypes.c_size_t, ctypes.c_size_t]
    base.ggml_backend_buffer_free.argtypes = [vp]
    base.ggml_free.argtypes = [vp]
    buft_fn.restype = vp
    cpu.ggml_cpu_init()
    buft = buft_fn()

    def repack(raw: np.ndarray, type_id: int, n: int, k: int) -> np.ndarray:
        raw = np.ascontiguousarray(raw)
        ctx = base.ggml_init(InitParams(1 << 16, None, True))
        t = base.ggml_new_tensor_2d(ctx, type_id, k, n)
        buf = base.ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft)
        try:
            base.ggml_backend_tensor_set(t, raw.ctypes.data, 0, raw.nbytes)  # repacks here
            data = (ctypes.c_uint8 * raw.nbytes).from_address(base.ggml_get_data(t))
            return np.frombuffer(bytes(data), np.uint8)
        finally:
            base.ggml_backend_buffer_free(buf)
            base.ggml_free(ctx)

    return repack


@pytest.mark.parametrize("qtype, n, k", [("Q4_0", 8, 32), ("Q4_0", 16, 256), ("Q4_0", 24, 96),
                                         ("Q4_K", 8, 256), ("Q4_K", 16, 512)])
def test_bytes_equal_what_ggml_builds_at_load_time(qtype, n, k, rng):
    repack = _ggml_cpu_repack()
    if repack is None:
        pytest.skip("libggml-python's libggml-cpu.so is not installed")
    from panelpack.formats import qtypes

    raw = random_blocks(qtype, n, k, rng)
    theirs = repack(raw, qtypes.get(qtype).id, n, k)
    if np.array_equal(theirs, raw.reshape(-1)):
        pytest.skip("this CPU/build of ggml does not repack (no AVX2 8x8 kernels)")
    assert np.array_equal(X.pack(raw, n, k, qtype)["blocks"].reshape(-1), theirs)


# ---- an independent transcription of llama.cpp's make_block_* + repack_*_to_*_8_bl ------------
def llama_repack_q4_0_8x8(raw, n, nb):
    """Scalar Python, following llama.cpp's loops: for each group of 8 rows, each block x,
    d[i] = row i's d; then for i in 0..15: 8 bytes of row i%8 at offset (i//8)*8, ^ 0x88."""
    src = raw.reshape(n, nb, 18)
    out = bytearray()
    for b in range(0, n, 8):
        for x in range(nb):
            blocks = [src[b + i, x] for i in range(8)]
            out += b"".join(bytes(blk[0:2]) for blk in blocks)
            for i in range(16):
                chunk = blocks[i % 8][2 + (i // 8) * 8: 2 + (i // 8) * 8 + 8]
                out += bytes(int(v) ^ 0x88 for v in chunk)
    return bytes(out)


def llama_repack_q4_K_8x8(raw, n, nsb):
    """Scalar Python after llama.cpp's make_block_q4_Kx8 (interleave 8): d[8], dmin[8], then
    the 96 scale bytes (sub-blocks 0..3 from the low 6 bits, 4..7 from the split high bits),
    then 128 runs of 8 qs bytes, run i from row i%8 at offset (i//8)*8."""
    src = raw.reshape(n, nsb, 144)
    out = bytearray()
    for b in range(0, n, 8):
        for x in range(nsb):
            blk = [src[b + i, x].astype(np.int64) for i in range(8)]
            d = b"".join(bytes(src[b + i, x, 0:2]) for i in range(8))
            dmin = b"".join(bytes(src[b + i, x, 2:4]) for i in range(8))
            scales = [0] * 96
            for i in range(4):
                s = [blk[j][4 + i] & 63 for j in range(8)]
                m = [blk[j][4 + i + 4] & 63 for j in range(8)]
                for lo, hi in ((0, s), (4, m)):
                    for j in range(4):
                        scales[12 * i + lo + j] = (hi[j] & 63) + ((hi[j + 4] & 48) << 2)
                for j in range(4):
                    scales[12 * i + 8 + j] = (s[j + 4] & 15) + ((m[j + 4] & 15) << 4)
            for i in range(4):
                s = [((blk[j][4 + i] & 192) >> 2) | (blk[j][4 + i + 8] & 15) for j in range(8)]
                m = [((blk[j][4 + i + 4] & 192) >> 2) | ((blk[j][4 + i + 8] & 240) >> 4) for j in range(8)]
                for lo, hi in ((0, s), (4, m)):
                    for j in range(4):
                        scales[48 + 12 * i + lo + j] = (hi[j] & 63) + ((hi[j + 4] & 48) << 2)
                for j in range(4):
                    scales[48 + 12 * i + 8 + j] = (s[j + 4] & 15) + ((m[j + 4] & 15) << 4)
            qs = bytearray()
            for i in range(128):
                qs += bytes(src[b + i % 8, x, 16 + (i // 8) * 8: 16 + (i // 8) * 8 + 8])
            out += d + dmin + bytes(v & 0xFF for v in scales) + bytes(qs)
    return bytes(out)


@pytest.mark.parametrize("n, k", [(8, 32), (16, 96), (8, 256)])
def test_q4_0_matches_llama_cpp(n, k, rng):
    raw = random_blocks("Q4_0", n, k, rng)
    assert X.pack(raw, n, k, "Q4_0")["blocks"].tobytes() == llama_repack_q4_0_8x8(raw, n, k // 32)


@pytest.mark.parametrize("n, k", [(8, 256), (16, 512)])
def test_q4_k_matches_llama_cpp(n, k, rng):
    raw = random_blocks("Q4_K", n, k, rng)
    assert X.pack(raw, n, k, "Q4_K")["blocks"].tobytes() == llama_repack_q4_K_8x8(raw, n, k // 256)


# ---- fast kernels against the numpy references -------------------------------------------------
@pytest.mark.parametrize("qtype, n, k", [
    ("Q4_0", 8, 128), ("Q4_0", 24, 512), ("Q4_0", 16, 96), ("Q4_0", 40, 576),  # word and byte paths
    ("Q4_K", 8, 256), ("Q4_K", 24, 768),
])
def test_fast_kernels_match_the_references(qtype, n, k, rng):
    raw = random_blocks(qtype, n, k, rng)
    fast = X.pack(raw, n, k, qtype)
    ref = X.pack_ref(raw, n, k, qtype)
    assert np.array_equal(fast["blocks"], ref["blocks"])
    assert np.array_equal(X.unpack_ref(ref, n, k, qtype), raw)
    assert np.array_equal(X.unpack(ref, n, k, qtype), raw)


def test_kernels_have_explicit_signatures():
    for name in ("_q4_0_x8_pack_w", "_q4_0_x8_unpack_w", "_q4_0_x8_pack_b", "_q4_0_x8_unpack_b",
                 "_q4_k_x8_pack", "_q4_k_x8_unpack"):
        f = getattr(K, name)
        if not hasattr(f, "signatures"):
            pytest.skip("numba JIT disabled (NUMBA_DISABLE_JIT=1)")
        assert f.signatures, name


def test_xor_turns_the_code_into_twos_complement():
    # u = 0..15 in row 0 -> the stored nibble read as int4 is u - 8; dequantize agrees.
    rows = [b"\x00\x3c" + bytes(0x11 * i for i in range(16))] + [b"\x00\x00" + bytes(16)] * 7
    raw = np.frombuffer(b"".join(rows), np.uint8).reshape(8, 18)
    x = X.pack(raw, 8, 32, "Q4_0")["blocks"].reshape(144)
    nib = x[16:24] & 15
    assert [int(v) - 16 * (int(v) >> 3) for v in nib] == [i - 8 for i in range(8)]
    y = X.dequantize({"blocks": x}, 8, 32, "Q4_0")
    assert y[0].tolist() == [float(i - 8) for i in range(16)] * 2 and not y[1:].any()


def test_params():
    assert X.params("Q4_0", 8, 32) == {"layout": "ggml-x8", "type": "Q4_0", "n": 8, "k": 32, "rows_interleaved": 8,
                                       "interleave_bytes": 8, "block_bytes": 144, "llama_cpp_kernel": "q4_0_8x8_q8_0",
                                       "invertible": True, "xor": 0x88}
    assert X.params("Q4_K", 8, 256)["llama_cpp_kernel"] == "q4_K_8x8_q8_K"


@pytest.mark.parametrize("qtype, k", [("Q4_0", 64), ("Q4_K", 512)])
def test_every_code_at_its_documented_address(qtype, k, rng):
    """Position-encoded codes (7n + k) % 16, read back at the byte FORMAT.md §4.3 gives."""
    n = 16
    nn, kk = np.meshgrid(np.arange(n), np.arange(k), indexing="ij")
    codes = (7 * nn + kk) % 16
    f = B.to_fields(random_blocks(qtype, n, k, rng), qtype, n, k)
    f["codes"] = codes.astype(np.uint8)
    x = X.pack(B.from_fields(f, qtype, n, k), n, k, qtype)["blocks"].reshape(-1)
    for row in range(n):
        sr, r = divmod(row, 8)
        for e_k in range(k):
            if qtype == "Q4_0":
                b, e = divmod(e_k, 32)
                byte = (sr * (k // 32) + b) * 144 + 16 + 64 * ((e % 16) // 8) + 8 * r + e % 8
                nib = ((x[byte] >> (4 * (e // 16))) & 15) ^ 8
            else:
                j, e = divmod(e_k, 256)
                idx = 32 * (e // 64) + e % 32
                byte = (sr * (k // 256) + j) * 1152 + 128 + 64 * (idx // 8) + 8 * r + idx % 8
                nib = (x[byte] >> (4 * ((e % 64) // 32))) & 15
            assert nib == codes[row, e_k], f"(n={row}, k={e_k}): byte {byte} holds {nib}, expected {codes[row, e_k]}"
