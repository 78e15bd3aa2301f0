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

#include "panelpack.h"

#define LANEDOT(acc, w, act, lane) acc = vdotq_laneq_s32(acc, w, act, lane)

/* the four lanes of v to dst[0], dst[stride], dst[2 stride], dst[3 stride] */
static inline void put4(int32x4_t v, int32_t *dst, int64_t stride) {
    int32_t t[4];
    vst1q_s32(t, v);
    for (int r = 0; r < 4; r++)
        dst[r * stride] = t[r];
}

static inline int8x16_t dup8(const int8_t *p) {
    int8x8_t h = vld1_s8(p);
    return vcombine_s8(h, h);
}

void ppk_neon_il8_nibble(const uint8_t *w, const int8_t *a, int64_t m, int64_t n, int64_t k, int offset, int32_t *P) {
    const int64_t nb = k / 32;
    const uint8x16_t low4 = vdupq_n_u8(15);
    const int8x16_t off = vdupq_n_s8((int8_t)offset);
    for (int64_t sr = 0; sr < n / 8; sr++)
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = w + (sr * nb + b) * 128;
            int8x16_t lo[8], hi[8];
            for (int g = 0; g < 8; g++) {
                uint8x16_t x = vld1q_u8(blk + 16 * g);
                lo[g] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(x, low4)), off);
                hi[g] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(x, 4)), off);
            }
            for (int64_t mm = 0; mm < m; mm++) {
                const int8x16_t a0 = vld1q_s8(a + mm * k + 32 * b), a1 = vld1q_s8(a + mm * k + 32 * b + 16);
                int32x4_t accl = vdupq_n_s32(0), acch = vdupq_n_s32(0);
                LANEDOT(accl, lo[0], a0, 0); LANEDOT(acch, hi[0], a0, 0);
                LANEDOT(accl, lo[1], a0, 1); LANEDOT(acch, hi[1], a0, 1);
                LANEDOT(accl, lo[2], a0, 2); LANEDOT(acch, hi[2], a0, 2);
                LANEDOT(accl, lo[3], a0, 3); LANEDOT(acch, hi[3], a0, 3);
                LANEDOT(accl, lo[4], a1, 0); LANEDOT(acch, hi[4], a1, 0);
                LANEDOT(accl, lo[5], a1, 1); LANEDOT(acch, hi[5], a1, 1);
                LANEDOT(accl, lo[6], a1, 2); LANEDOT(acch, hi[6], a1, 2);
                LANEDOT(accl, lo[7], a1, 3); LANEDOT(acch, hi[7], a1, 3);
                int32_t *out = P + (mm * n + 8 * sr) * nb + b;
                put4(accl, out, nb);
                put4(acch, out + 4 * nb, nb);
            }
        }
}

void ppk_neon_il8_int8(const uint8_t *w, const int8_t *a, int64_t m, int64_t n, int64_t k, int offset, int32_t *P) {
    (void)offset;
    const int64_t nb = k / 32;
    for (int64_t sr = 0; sr < n / 8; sr++)
        for (int64_t b = 0; b < nb; b++) {
            const int8_t *blk = (const int8_t *)w + (sr * nb + b) * 256;
            for (int64_t mm = 0; mm < m; mm++) {
                const int8x16_t a0 = vld1q_s8(a + mm * k + 32 * b), a1 = vld1q_s8(a + mm * k + 32 * b + 16);
                int32x4_t accl = vdupq_n_s32(0), acch = vdupq_n_s32(0);
#define STEP(g, av, lane)                                          \
    LANEDOT(accl, vld1q_s8(blk + 32 * (g)), av, lane);             \
    LANEDOT(acch, vld1q_s8(blk + 32 * (g) + 16), av, lane)
                STEP(0, a0, 0); STEP(1, a0, 1); STEP(2, a0, 2); STEP(3, a0, 3);
                STEP(4, a1, 0); STEP(5, a1, 1); STEP(6, a1, 2); STEP(7, a1, 3);
#undef STEP
                int32_t *out = P + (mm * n + 8 * sr) * nb + b;
                put4(accl, out, nb);
                put4(acch, out + 4 * nb, nb);
            }
        }
}

void ppk_neon_x8_q4_0(const uint8_t *w, const int8_t *a, int64_t m, int64_t n, int64_t k, int offset, int32_t *P) {
    (void)offset;
    const int64_t nb = k / 32;
    for (int64_t sr = 0; sr < n / 8; sr++)
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *qs = w + (sr * nb + b) * 144 + 16;
            int8x16_t lo[8], hi[8]; /* [h][p]: rows 2p, 2p+1 of half h */
            for (int i = 0; i < 8; i++) {
                int8x16_t x = vreinterpretq_s8_u8(vld1q_u8(qs + 16 * i));
                lo[i] = vshrq_n_s8(vshlq_n_s8(x, 4), 4); /* sign-extended low int4 */
                hi[i] = vshrq_n_s8(x, 4);
            }
            for (int64_t mm = 0; mm < m; mm++) {
                const int8_t *am = a + mm * k + 32 * b;
                int32x4_t acc[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
                for (int h = 0; h < 2; h++) {
                    const int8x16_t al = dup8(am + 8 * h), ah = dup8(am + 8 * h + 16);
                    for (int p = 0; p < 4; p++) {
                        acc[p] = vdotq_s32(acc[p], lo[4 * h + p], al);
                        acc[p] = vdotq_s32(acc[p], hi[4 * h + p], ah);
                    }
                }
                const int32x4_t r03 = vpaddq_s32(acc[0], acc[1]), r47 = vpaddq_s32(acc[2], acc[3]);
                int32_t *out = P + (mm * n + 8 * sr) * nb + b;
                put4(r03, out, nb);
                put4(r47, out + 4 * nb, nb);
            }
        }
}

void ppk_neon_x8_q4_k(const uint8_t *w, const int8_t *a, int64_t m, int64_t n, int64_t k, int offset, int32_t *P) {
    (void)offset;
    const int64_t nsb = k / 256, ng = k / 32;
    const uint8x16_t low4 = vdupq_n_u8(15);
    for (int64_t sr = 0; sr < n / 8; sr++)
        for (int64_t j = 0; j < nsb; j++) {
            const uint8_t *qs = w + (sr * nsb + j) * 1152 + 128;
            for (int64_t mm = 0; mm < m; mm++) {
                const int8_t *am = a + mm * k + 256 * j;
                int32_t *out = P + (mm * n + 8 * sr) * ng + 8 * j;
                for (int c = 0; c < 4; c++) {
                    int32x4_t accl[4], acch[4];
                    for (int p = 0; p < 4; p++)
                        accl[p] = acch[p] = vdupq_n_s32(0);
                    for (int hh = 0; hh < 4; hh++) {
                        const uint8_t *row = qs + 64 * (4 * c + hh);
                        const int8x16_t al = dup8(am + 64 * c + 8 * hh), ah = dup8(am + 64 * c + 32 + 8 * hh);
                        for (int p = 0; p < 4; p++) {
                            uint8x16_t x = vld1q_u8(row + 16 * p);
                            accl[p] = vdotq_s32(accl[p], vreinterpretq_s8_u8(vandq_u8(x, low4)), al);
                            acch[p] = vdotq_s32(acch[p], vreinterpretq_s8_u8(vshrq_n_u8(x, 4)), ah);
                        }
                    }
                    const int32x4_t l03 = vpaddq_s32(accl[0], accl[1]), l47 = vpaddq_s32(accl[2], accl[3]);
                    const int32x4_t h03 = vpaddq_s32(acch[0], acch[1]), h47 = vpaddq_s32(acch[2], acch[3]);
                    put4(l03, out + 2 * c, ng);
                    put4(l47, out + 4 * ng + 2 * c, ng);
                    put4(h03, out + 2 * c + 1, ng);
                    put4(h47, out + 4 * ng + 2 * c + 1, ng);
                }
            }
        }
}
