/* neon_il8.h: the NEON decoding of the 8-row interleaved units that neon_il8.c (SDOT) and
 * i8mm_il8.c (SMMLA) share; the byte maps are drawn in neon_il8.c. MIT. */
#ifndef PANELPACK_NEON_IL8_H
#define PANELPACK_NEON_IL8_H

#include <arm_neon.h>

/* il8-nibble unit (128 B): step g = bytes 16g .. 16g+15 -> lo[g] = (x & 15) - offset, rows 0-3
 * x 4 K, and hi[g] = (x >> 4) - offset, rows 4-7 x 4 K */
static inline void il8_nibble_steps(const uint8_t *blk, int offset, int8x16_t lo[8], int8x16_t hi[8]) {
    const uint8x16_t low4 = vdupq_n_u8(15);
    const int8x16_t off = vdupq_n_s8((int8_t)offset);
    for (int g = 0; g < 8; g++) {
        uint8x16_t x = vld1q_u8(blk + 16 * g);
        lo[g] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(x, low4)), off);
        hi[g] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(x, 4)), off);
    }
}

/* ggml-x8 Q4_0 codes (128 B at qs): 16-byte run 4h + p = rows 2p, 2p+1 of half h -> its
 * sign-extended low (lo) and high (hi) int4 */
static inline void x8_q4_0_codes(const uint8_t *qs, int8x16_t lo[8], int8x16_t hi[8]) {
    for (int i = 0; i < 8; i++) {
        int8x16_t x = vreinterpretq_s8_u8(vld1q_u8(qs + 16 * i));
        lo[i] = vshrq_n_s8(vshlq_n_s8(x, 4), 4);
        hi[i] = vshrq_n_s8(x, 4);
    }
}

/* ggml-x8 Q4_K codes of chunk c (sub-blocks 2c, 2c+1): run 4hh + p = rows 2p, 2p+1 x 8 K at
 * qs + 64(4c + hh) + 16p -> lo[4hh + p] its low nibbles (sub-block 2c), hi[4hh + p] its high
 * nibbles (2c + 1), unsigned 0..15 */
static inline void x8_q4_k_codes(const uint8_t *qs, int c, int8x16_t lo[16], int8x16_t hi[16]) {
    const uint8x16_t low4 = vdupq_n_u8(15);
    for (int i = 0; i < 16; i++) {
        uint8x16_t x = vld1q_u8(qs + 64 * 4 * c + 16 * i);
        lo[i] = vreinterpretq_s8_u8(vandq_u8(x, low4));
        hi[i] = vreinterpretq_s8_u8(vshrq_n_u8(x, 4));
    }
}

/* The ggml-x8 Q4_K unit (super-block u of super-row sr, at blk) for an ISA: `rows` activation
 * rows a step (SDOT 1, SMMLA 2; a1 = 0 when absent), act(a0, a1, e) their 16 activation bytes
 * from K offset e of the super-block, mac(acc, w, act) the int32x4 += int8x16 . int8x16 step, and
 * put(accl, acch, p0, p1, ng) the sums of chunk c (sub-blocks 2c: accl, 2c + 1: acch; accumulator
 * p over rows 2p, 2p+1) to P at p0 = row mm's, p1 = row mm + 1's (or 0), sub-block 8u + 2c. */
typedef int8x16_t (*x8_act_fn)(const int8_t *a0, const int8_t *a1, int64_t e);
typedef int32x4_t (*x8_mac_fn)(int32x4_t acc, int8x16_t w, int8x16_t act);
typedef void (*x8_put_fn)(const int32x4_t accl[4], const int32x4_t acch[4], int32_t *p0, int32_t *p1, int64_t ng);

static inline void x8_q4_k_unit(const uint8_t *blk, const int8_t *a, int64_t m, int64_t n, int64_t k, int64_t sr,
                                int64_t u, int32_t *P, int rows, x8_act_fn act, x8_mac_fn mac, x8_put_fn put) {
    const int64_t ng = k / 32;
    const uint8_t *qs = blk + 128;
    int8x16_t lo[16], hi[16];
    for (int64_t mm = 0; mm < m; mm += rows) {
        const int8_t *a0 = a + mm * k + 256 * u, *a1 = rows == 2 && mm + 1 < m ? a0 + k : 0;
        int32_t *p0 = P + (mm * n + 8 * sr) * ng + 8 * u, *p1 = a1 ? p0 + n * ng : 0;
        for (int c = 0; c < 4; c++) {
            int32x4_t accl[4], acch[4];
            for (int p = 0; p < 4; p++)
                accl[p] = acch[p] = vdupq_n_s32(0);
            x8_q4_k_codes(qs, c, lo, hi);
            for (int hh = 0; hh < 4; hh++) {
                const int8x16_t al = act(a0, a1, 64 * c + 8 * hh), ah = act(a0, a1, 64 * c + 32 + 8 * hh);
                for (int p = 0; p < 4; p++) {
                    accl[p] = mac(accl[p], lo[4 * hh + p], al);
                    acch[p] = mac(acch[p], hi[4 * hh + p], ah);
                }
            }
            put(accl, acch, p0 + 2 * c, p1 ? p1 + 2 * c : 0, ng);
        }
    }
}

#endif
