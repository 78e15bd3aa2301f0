/* neon_panel.c: the panel64 leaf in Advanced SIMD with FEAT_DotProd, over the same bytes as the
 * SME2 leaves (docs/FORMAT.md §4.2), for CPUs without SME2 or with a streaming vector length
 * other than 512 bits. MIT. Build: -march=armv8.2-a+dotprod.
 *
 * A 128-byte nibble kg-block is read 16 bytes (8 channels) at a time; register r = bytes
 * 16r .. 16r+15 = channels 8r .. 8r+7:
 *
 *   byte 2c' = u(k0) | u(k1) << 4,  byte 2c'+1 = u(k2) | u(k3) << 4      (c' = 0..7)
 *   lo = x & 0x0f   -> lo[2c'] = k0, lo[2c'+1] = k2
 *   hi = x >> 4     -> hi[2c'] = k1, hi[2c'+1] = k3
 *   zip1(lo, hi)    -> k0 k1 k2 k3 of channels 8r .. 8r+3     ([4 ch][4 K], the SDOT order)
 *   zip2(lo, hi)    -> k0 k1 k2 k3 of channels 8r+4 .. 8r+7
 *   tbl             -> the int8 value of each code (the low byte of each ZT0 entry)
 *   sdot acc.4s, w.16b, act.4b[q % 4]
 *
 * A 256-byte int8 kg-block is already [4 v][16 ch][4 K]: register r = channels 4r .. 4r+3.
 * act = the 16 activation bytes a[gG + 4(q & ~3) ..], as the SME2 GEMV's ld1rqb loads them.
 * Sixteen int32x4 accumulators hold the 64 channels of one (row, super-block, group); the
 * output is panel order, as the SME2 leaves'.
 */
#include <arm_neon.h>

#include "panelpack.h"

#define DOT4(acc, w, act, q)                                               \
    switch ((q) & 3) {                                                     \
    case 0: acc = vdotq_laneq_s32(acc, w, act, 0); break;                  \
    case 1: acc = vdotq_laneq_s32(acc, w, act, 1); break;                  \
    case 2: acc = vdotq_laneq_s32(acc, w, act, 2); break;                  \
    default: acc = vdotq_laneq_s32(acc, w, act, 3); break;                 \
    }

void ppk_neon_panel(int form, const uint8_t *panels, const uint8_t *zt0, const int8_t *a, int64_t m, int64_t nsb,
                    int64_t k, int64_t G, int32_t *P) {
    const int64_t ng = k / G, kq = G / 4, kgb = ppk_panel_forms[form].kg_bytes;
    int8x16_t table = vdupq_n_s8(0);
    if (ppk_panel_forms[form].uses_zt0) {
        int8_t t16[16];
        for (int i = 0; i < 16; i++)
            t16[i] = (int8_t)zt0[4 * i];
        table = vld1q_s8(t16);
    }
    const uint8x16_t low4 = vdupq_n_u8(0x0f);
    for (int64_t row = 0; row < m; row++) {
        for (int64_t sb = 0; sb < nsb; sb++) {
            for (int64_t g = 0; g < ng; g++) {
                int32x4_t acc[16];
                for (int j = 0; j < 16; j++)
                    acc[j] = vdupq_n_s32(0);
                const uint8_t *blk = panels + (sb * ng + g) * kq * kgb;
                const int8_t *act = a + row * k + g * G;
                int8x16_t av = vdupq_n_s8(0);
                for (int64_t q = 0; q < kq; q++, blk += kgb) {
                    if ((q & 3) == 0)
                        av = vld1q_s8(act + 4 * q);
                    if (form == PPK_FORM_NIBBLE) {
                        for (int r = 0; r < 8; r++) {
                            uint8x16_t x = vld1q_u8(blk + 16 * r);
                            uint8x16_t lo = vandq_u8(x, low4), hi = vshrq_n_u8(x, 4);
                            int8x16_t w0 = vqtbl1q_s8(table, vzip1q_u8(lo, hi));
                            int8x16_t w1 = vqtbl1q_s8(table, vzip2q_u8(lo, hi));
                            DOT4(acc[2 * r], w0, av, q);
                            DOT4(acc[2 * r + 1], w1, av, q);
                        }
                    } else {
                        for (int r = 0; r < 16; r++) {
                            int8x16_t w = vld1q_s8((const int8_t *)blk + 16 * r);
                            DOT4(acc[r], w, av, q);
                        }
                    }
                }
                int32_t *out = P + ((row * nsb + sb) * ng + g) * PPK_CHANNELS;
                for (int j = 0; j < 16; j++)
                    vst1q_s32(out + 4 * j, acc[j]);
            }
        }
    }
}
