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

/* panel64-compact (§4.2.1): add bit plane p's 2^(B+p) to the lanes of register R (16 lanes =
 * plane bytes 2R, 2R+1: each byte to 8 lanes, CMTST with the lane's bit, AND, ADD). */
static inline int8x16_t add_planes(int8x16_t w, const uint8_t *plane0, int64_t R, int base, int planes, int64_t kq) {
    static const uint8_t lane_bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t bit = vld1q_u8(lane_bit);
    for (int p = 0; p < planes; p++) {
        const uint8_t *pb = plane0 + p * kq * 32 + 2 * R;
        uint8x16_t b = vcombine_u8(vdup_n_u8(pb[0]), vdup_n_u8(pb[1]));
        int8x16_t set = vreinterpretq_s8_u8(vtstq_u8(b, bit));
        w = vaddq_s8(w, vandq_s8(set, vdupq_n_s8((int8_t)(1 << (base + p)))));
    }
    return w;
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
    const uint8x16_t low4 = vdupq_n_u8(0x0f), low2 = vdupq_n_u8(0x03);
    static const uint8_t spread_idx[16] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
    static const int8_t crumb_shift[16] = {0, -2, -4, -6, 0, -2, -4, -6, 0, -2, -4, -6, 0, -2, -4, -6};
    const uint8x16_t spread = vld1q_u8(spread_idx);
    const int8x16_t cshift = vld1q_s8(crumb_shift);
    const int base = ppk_panel_forms[form].base_bits, planes = ppk_panel_forms[form].planes;
    const int compact = form >= PPK_FORM_C4P1;
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
                    if (compact) { /* the group record: base kg-blocks, then the bit planes */
                        const uint8_t *grp = blk - q * kgb, *bq = grp + q * 32 * base;
                        const uint8_t *plane0 = grp + kq * 32 * base + q * 32;
                        if (base == 4) {
                            for (int r = 0; r < 8; r++) {
                                uint8x16_t x = vld1q_u8(bq + 16 * r);
                                uint8x16_t lo = vandq_u8(x, low4), hi = vshrq_n_u8(x, 4);
                                int8x16_t w0 = add_planes(vqtbl1q_s8(table, vzip1q_u8(lo, hi)), plane0, 2 * r, base, planes, kq);
                                int8x16_t w1 = add_planes(vqtbl1q_s8(table, vzip2q_u8(lo, hi)), plane0, 2 * r + 1, base, planes, kq);
                                DOT4(acc[2 * r], w0, av, q);
                                DOT4(acc[2 * r + 1], w1, av, q);
                            }
                        } else {
                            for (int r = 0; r < 16; r++) {
                                uint8x16_t x = vreinterpretq_u8_u32(vdupq_n_u32((uint32_t)bq[4 * r] | (uint32_t)bq[4 * r + 1] << 8 |
                                                                                 (uint32_t)bq[4 * r + 2] << 16 | (uint32_t)bq[4 * r + 3] << 24));
                                uint8x16_t u = vandq_u8(vshlq_u8(vqtbl1q_u8(x, spread), cshift), low2);
                                int8x16_t w = add_planes(vqtbl1q_s8(table, u), plane0, r, base, planes, kq);
                                DOT4(acc[r], w, av, q);
                            }
                        }
                    } else if (form == PPK_FORM_NIBBLE) {
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
