/* i8mm_il8.c: the 8-row interleaved kernels with FEAT_I8MM (SMMLA), P in row order [M][N][K/32]
 * (docs/FORMAT.md §4.3-4.5; the byte maps are drawn in neon_il8.c). MIT.
 * Build: -march=armv8.2-a+dotprod+i8mm.
 *
 * SMMLA Vd.4S, Vn.16B, Vm.16B multiplies a 2x8 int8 matrix (Vn: row 0 = bytes 0-7, row 1 =
 * bytes 8-15) by the transpose of another (Vm), adding the 2x2 int32 result [n0.m0, n0.m1,
 * n1.m0, n1.m1] to Vd. Two activation rows go through each step (an odd M pairs its last row
 * with zeros). Weights:
 *   ggml-x8: 16 code bytes are exactly rows 2p, 2p+1 x 8 K (the form's 8-byte interleave);
 *   il8-*:   steps g, g+1 each hold [4 rows][4 K]; zip1/zip2 on 32-bit lanes makes
 *            [row 0: 8 K][row 1: 8 K] and [row 2][row 3] (K = 4g .. 4g+7).
 */
#include <arm_neon.h>

#include "neon_il8.h"
#include "panelpack.h"

/* two activation rows (the second may be absent: zeros) x 8 K from offset e */
static inline int8x16_t act2(const int8_t *a0, const int8_t *a1, int64_t e) {
    return vcombine_s8(vld1_s8(a0 + e), a1 ? vld1_s8(a1 + e) : vdup_n_s8(0));
}

/* acc = [r0.m0, r0.m1, r1.m0, r1.m1] -> P[m0][r0], P[m1][r0], P[m0][r1], P[m1][r1] */
static inline void put2x2(int32x4_t acc, int32_t *p0, int32_t *p1, int64_t rstride) {
    int32_t t[4];
    vst1q_s32(t, acc);
    p0[0] = t[0];
    p0[rstride] = t[2];
    if (p1) {
        p1[0] = t[1];
        p1[rstride] = t[3];
    }
}

static inline int8x16_t zip1_32(int8x16_t x, int8x16_t y) {
    return vreinterpretq_s8_s32(vzip1q_s32(vreinterpretq_s32_s8(x), vreinterpretq_s32_s8(y)));
}
static inline int8x16_t zip2_32(int8x16_t x, int8x16_t y) {
    return vreinterpretq_s8_s32(vzip2q_s32(vreinterpretq_s32_s8(x), vreinterpretq_s32_s8(y)));
}

/* steps[g] = [rows 0-3 x 4 K] (lo) and [rows 4-7 x 4 K] (hi) of one 32-element block -> P */
static void il8_block(const int8x16_t *lo, const int8x16_t *hi, const int8_t *a, int64_t m, int64_t n, int64_t k,
                      int64_t nb, int64_t sr, int64_t b, int32_t *P) {
    int8x16_t wr[4][4]; /* [pair of steps gp][row pair 01, 23, 45, 67] */
    for (int gp = 0; gp < 4; gp++) {
        wr[gp][0] = zip1_32(lo[2 * gp], lo[2 * gp + 1]);
        wr[gp][1] = zip2_32(lo[2 * gp], lo[2 * gp + 1]);
        wr[gp][2] = zip1_32(hi[2 * gp], hi[2 * gp + 1]);
        wr[gp][3] = zip2_32(hi[2 * gp], hi[2 * gp + 1]);
    }
    for (int64_t mm = 0; mm < m; mm += 2) {
        const int8_t *a0 = a + mm * k + 32 * b, *a1 = mm + 1 < m ? a0 + k : 0;
        int32x4_t acc[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
        for (int gp = 0; gp < 4; gp++) {
            const int8x16_t av = act2(a0, a1, 8 * gp);
            for (int q = 0; q < 4; q++)
                acc[q] = vmmlaq_s32(acc[q], wr[gp][q], av);
        }
        int32_t *p0 = P + (mm * n + 8 * sr) * nb + b, *p1 = a1 ? p0 + n * nb : 0;
        for (int q = 0; q < 4; q++)
            put2x2(acc[q], p0 + 2 * q * nb, p1 ? p1 + 2 * q * nb : 0, nb);
    }
}

static void i8mm_il8_nibble(PPK_IL8_UNIT_ARGS) {
    int8x16_t lo[8], hi[8];
    il8_nibble_steps(blk, offset, lo, hi);
    il8_block(lo, hi, a, m, n, k, k / 32, sr, u, P);
}

static void i8mm_il8_int8(PPK_IL8_UNIT_ARGS) {
    (void)offset;
    const int8_t *st = (const int8_t *)blk;
    int8x16_t lo[8], hi[8];
    for (int g = 0; g < 8; g++) {
        lo[g] = vld1q_s8(st + 32 * g);
        hi[g] = vld1q_s8(st + 32 * g + 16);
    }
    il8_block(lo, hi, a, m, n, k, k / 32, sr, u, P);
}

static void i8mm_x8_q4_0(PPK_IL8_UNIT_ARGS) {
    (void)offset;
    const int64_t nb = k / 32;
    int8x16_t lo[8], hi[8]; /* index 4h + p: rows 2p, 2p+1 of half h */
    x8_q4_0_codes(blk + 16, lo, hi);
    for (int64_t mm = 0; mm < m; mm += 2) {
        const int8_t *a0 = a + mm * k + 32 * u, *a1 = mm + 1 < m ? a0 + k : 0;
        int32x4_t acc[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
        for (int h = 0; h < 2; h++) {
            const int8x16_t al = act2(a0, a1, 8 * h), ah = act2(a0, a1, 8 * h + 16);
            for (int p = 0; p < 4; p++) {
                acc[p] = vmmlaq_s32(acc[p], lo[4 * h + p], al);
                acc[p] = vmmlaq_s32(acc[p], hi[4 * h + p], ah);
            }
        }
        int32_t *p0 = P + (mm * n + 8 * sr) * nb + u, *p1 = a1 ? p0 + n * nb : 0;
        for (int p = 0; p < 4; p++)
            put2x2(acc[p], p0 + 2 * p * nb, p1 ? p1 + 2 * p * nb : 0, nb);
    }
}

/* x8_q4_k_unit's hooks: act2, SMMLA, each accumulator's 2x2 to its two rows of both activation rows */
static int32x4_t smmla(int32x4_t acc, int8x16_t w, int8x16_t act) {
    return vmmlaq_s32(acc, w, act);
}

static void put_smmla(const int32x4_t accl[4], const int32x4_t acch[4], int32_t *p0, int32_t *p1, int64_t ng) {
    for (int p = 0; p < 4; p++) {
        put2x2(accl[p], p0 + 2 * p * ng, p1 ? p1 + 2 * p * ng : 0, ng);
        put2x2(acch[p], p0 + 2 * p * ng + 1, p1 ? p1 + 2 * p * ng + 1 : 0, ng);
    }
}

static void i8mm_x8_q4_k(PPK_IL8_UNIT_ARGS) {
    (void)offset;
    x8_q4_k_unit(blk, a, m, n, k, sr, u, P, 2, act2, smmla, put_smmla);
}

PPK_IL8_DEFINE(i8mm)
