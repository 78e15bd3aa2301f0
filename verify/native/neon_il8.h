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

#endif
