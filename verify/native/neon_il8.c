/* neon_il8.c: the 8-row interleaved kernels in Advanced SIMD with FEAT_DotProd (SDOT by
 * element / by vector), P in row order [M][N][K/32] (docs/FORMAT.md §4.3-4.5). MIT.
 * Build: -march=armv8.2-a+dotprod.
 *
 * il8-nibble, 128 B per (super-row sr, block b), step g = bytes 16g .. 16g+15:
 *   byte 16g + i: low nibble = u(row i/4, element 4g + i%4), high nibble = u(row 4 + i/4, same)
 *   -> lo = (x & 15) - offset is [rows 0-3][4 K], hi = (x >> 4) - offset is [rows 4-7][4 K]:
 *   sdot lane g%4 of the 16 activation bytes a[32b + 16(g/4) ..] gives 4 rows at once.
 * il8-int8, 256 B: step g = 32 bytes, [h = 0: rows 0-3][h = 1: rows 4-7] x 4 K, int8 codes.
 * ggml-x8 Q4_0 (block_q4_0x8, 144 B): codes at 16 + 64h + 8r + i (h 0..1) = row r's qs byte
 *   8h + i XOR 0x88, low nibble element 8h + i, high 8h + 16 + i, each a two's-complement int4.
 *   16 bytes = rows 2p, 2p+1 x 8 bytes; sdot against the 8 activation bytes twice gives two
 *   half sums per row, added pairwise at the end.
 * ggml-x8 Q4_K (block_q4_Kx8, 1152 B): codes at 128 + 64h + 8r + i (h 0..15) = row r's qs
 *   byte 8h + i: chunk c = h/4, l = 8(h%4) + i, low nibble element 64c + l (sub-block 2c),
 *   high 64c + 32 + l (sub-block 2c + 1); codes 0..15 unsigned (c = q).
 */
#include <arm_neon.h>

#include "neon_il8.h"
#include "panelpack.h"

#define LANEDOT(acc, w, act, lane) acc = vdotq_laneq_s32(acc, w, act, lane)

/* the four lanes of v to dst[0], dst[stride], dst[2 stride], dst[3 stride] */
static inline void put4(int32x4_t v, int32_t *dst, int64_t stride) {
    int32_t t[4];
    vst1q_s32(t, v);
    for (int r = 0; r < 4; r++)
        dst[r * stride] = t[r];
}

/* rows 0-3 (r03) and 4-7 (r47) of a super-row to P[row][.] with the given row stride */
static inline void put8(int32x4_t r03, int32x4_t r47, int32_t *dst, int64_t stride) {
    put4(r03, dst, stride);
    put4(r47, dst + 4 * stride, stride);
}

static inline int8x16_t dup8(const int8_t *p) {
    int8x8_t h = vld1_s8(p);
    return vcombine_s8(h, h);
}

static void neon_il8_nibble(PPK_IL8_UNIT_ARGS) {
    const int64_t nb = k / 32;
    int8x16_t lo[8], hi[8];
    il8_nibble_steps(blk, offset, lo, hi);
    for (int64_t mm = 0; mm < m; mm++) {
        const int8x16_t a0 = vld1q_s8(a + mm * k + 32 * u), a1 = vld1q_s8(a + mm * k + 32 * u + 16);
        int32x4_t accl = vdupq_n_s32(0), acch = vdupq_n_s32(0);
        LANEDOT(accl, lo[0], a0, 0); LANEDOT(acch, hi[0], a0, 0);
        LANEDOT(accl, lo[1], a0, 1); LANEDOT(acch, hi[1], a0, 1);
        LANEDOT(accl, lo[2], a0, 2); LANEDOT(acch, hi[2], a0, 2);
        LANEDOT(accl, lo[3], a0, 3); LANEDOT(acch, hi[3], a0, 3);
        LANEDOT(accl, lo[4], a1, 0); LANEDOT(acch, hi[4], a1, 0);
        LANEDOT(accl, lo[5], a1, 1); LANEDOT(acch, hi[5], a1, 1);
        LANEDOT(accl, lo[6], a1, 2); LANEDOT(acch, hi[6], a1, 2);
        LANEDOT(accl, lo[7], a1, 3); LANEDOT(acch, hi[7], a1, 3);
        put8(accl, acch, P + (mm * n + 8 * sr) * nb + u, nb);
    }
}

static void neon_il8_int8(PPK_IL8_UNIT_ARGS) {
    (void)offset;
    const int64_t nb = k / 32;
    const int8_t *st = (const int8_t *)blk;
    for (int64_t mm = 0; mm < m; mm++) {
        const int8x16_t a0 = vld1q_s8(a + mm * k + 32 * u), a1 = vld1q_s8(a + mm * k + 32 * u + 16);
        int32x4_t accl = vdupq_n_s32(0), acch = vdupq_n_s32(0);
#define STEP(g, av, lane)                                          \
    LANEDOT(accl, vld1q_s8(st + 32 * (g)), av, lane);              \
    LANEDOT(acch, vld1q_s8(st + 32 * (g) + 16), av, lane)
        STEP(0, a0, 0); STEP(1, a0, 1); STEP(2, a0, 2); STEP(3, a0, 3);
        STEP(4, a1, 0); STEP(5, a1, 1); STEP(6, a1, 2); STEP(7, a1, 3);
#undef STEP
        put8(accl, acch, P + (mm * n + 8 * sr) * nb + u, nb);
    }
}

static void neon_x8_q4_0(PPK_IL8_UNIT_ARGS) {
    (void)offset;
    const int64_t nb = k / 32;
    int8x16_t lo[8], hi[8]; /* [h][p]: rows 2p, 2p+1 of half h */
    x8_q4_0_codes(blk + 16, lo, hi);
    for (int64_t mm = 0; mm < m; mm++) {
        const int8_t *am = a + mm * k + 32 * u;
        int32x4_t acc[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
        for (int h = 0; h < 2; h++) {
            const int8x16_t al = dup8(am + 8 * h), ah = dup8(am + 8 * h + 16);
            for (int p = 0; p < 4; p++) {
                acc[p] = vdotq_s32(acc[p], lo[4 * h + p], al);
                acc[p] = vdotq_s32(acc[p], hi[4 * h + p], ah);
            }
        }
        put8(vpaddq_s32(acc[0], acc[1]), vpaddq_s32(acc[2], acc[3]), P + (mm * n + 8 * sr) * nb + u, nb);
    }
}

/* x8_q4_k_unit's hooks: one activation row (8 bytes twice), SDOT by vector, the pairwise sums */
static int8x16_t act1(const int8_t *a0, const int8_t *a1, int64_t e) {
    (void)a1;
    return dup8(a0 + e);
}

static int32x4_t sdot(int32x4_t acc, int8x16_t w, int8x16_t act) {
    return vdotq_s32(acc, w, act);
}

static void put_sdot(const int32x4_t accl[4], const int32x4_t acch[4], int32_t *p0, int32_t *p1, int64_t ng) {
    (void)p1;
    put8(vpaddq_s32(accl[0], accl[1]), vpaddq_s32(accl[2], accl[3]), p0, ng);
    put8(vpaddq_s32(acch[0], acch[1]), vpaddq_s32(acch[2], acch[3]), p0 + 1, ng);
}

static void neon_x8_q4_k(PPK_IL8_UNIT_ARGS) {
    (void)offset;
    x8_q4_k_unit(blk, a, m, n, k, sr, u, P, 1, act1, sdot, put_sdot);
}

PPK_IL8_DEFINE(neon)
