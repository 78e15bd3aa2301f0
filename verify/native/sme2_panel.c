/* sme2_panel.c: the panel64 SME2 leaves at a 512-bit streaming vector length (docs/FORMAT.md §4.2).
 * MIT. Build: clang >= 19, -march=armv9-a+sme2 (Apple: -march=armv8.2-a+dotprod+i8mm+sme2,
 * armv9-a implies SVE2, which Apple's cores lack); see docs/NATIVE.md.
 *
 * A kg-block is 4 consecutive K x 64 channels. Its expanded form is four vectors z0..z3 of
 * 64 int8 each, vector v = channels 16v .. 16v+15, byte 4(ch % 16) + j = K offset j:
 *
 *   nibble panel, 128 B               int8 panel, 256 B
 *   ld1b  z16 <- bytes 0..63          ld1b {z0-z3} <- bytes 0..255
 *   ld1b  z17 <- bytes 64..127        (already expanded)
 *   luti4 {z0-z1}, zt0, z16[0]        LUTI4 .B has one segment: z0 takes nibbles 0..63 of z16
 *   luti4 {z2-z3}, zt0, z17[0]        (low nibble first), z1 nibbles 64..127; each nibble is
 *                                     replaced by the low byte of its 32-bit ZT0 entry
 *
 * GEMV (one activation row): per super-block, ZA is zeroed once per 16 groups; group g
 * accumulates into the four ZA vectors of slot s = g % 16 (array vectors s, s+16, s+32, s+48 =
 * channels 0-15, 16-31, 32-47, 48-63):
 *   ld1rqb z12, [a + gG + 16i]                    16 activation bytes, copied to each 128-bit segment
 *   sdot za.s[w, 0, vgx4], {z0-z3}, z12.b[j]      kg-block q = 4i + j: lane e of vector v gains
 *                                                  sum_c W[16v+e][4q+c] a[gG + 4q + c]
 *   mova {z8-z11}, za.d[w, 0, vgx4]; st1w         the 64 int32 partials of (sb, g)
 * GEMM (16 activation rows per tile): activations packed so that one 64-byte vector is
 * rows 0..15 x 4 K (byte 4i + c = row i, K offset c); per kg-block four SMOPA, tile t = channels
 * 16t .. 16t+15; rows past M are predicated off (the byte predicate covers 4·rows bytes: SMOPA
 * predicates act per byte, docs/FORMAT.md §7.9).
 *
 * Toolchain notes (clang 19, measured): the multi-vector LUTI4 intrinsic loses its dependence on
 * an LDR ZT0 in the same basic block, which is then deleted; ZT0 is therefore loaded by its own
 * non-inlined function (load_zt0), and the build checks that an `ldr zt0` survives. The SME ABI
 * routines __arm_tpidr2_save/__arm_za_disable come from sme_abi.S where no compiler-rt is at hand.
 */
#include <arm_sme.h>
#include <stdlib.h>

#include "panelpack.h"

#define VLB 64      /* bytes per vector at SVL 512 */
#define ROWS 16     /* activation rows per GEMM tile */

int64_t ppk_sme2_svl_bytes(void) { return (int64_t)svcntsb(); }

__attribute__((noinline)) static void load_zt0(const uint8_t *table) __arm_streaming __arm_out("zt0") __arm_preserves("za") {
    svldr_zt(0, table);
}

/* The four expanded vectors of kg-block q of a group whose bytes start at grp (the table above;
 * nibble and int8 panels: grp + q * kg_bytes). panel64-compact records (§4.2.1): base plane q at
 * grp + 32·B·q through LUTI4 (B = 4, two registers twice) or LUTI2 (B = 2, four registers), then
 * per bit plane p the four predicates at grp + 32·B·kq + 32·(p·kq + q) (LDR P) and a predicated
 * ADD of 2^(B+p). */
static inline __attribute__((always_inline)) svint8x4_t expand(int form, const uint8_t *grp, int64_t q, int64_t kq) __arm_streaming __arm_in("zt0") __arm_preserves("za") {
    svbool_t all = svptrue_b8();
    if (form == PPK_FORM_INT8)
        return svld1_s8_x4(svptrue_c8(), (const int8_t *)(grp + q * 256));
    const int base = ppk_panel_forms[form].base_bits, planes = ppk_panel_forms[form].planes;
    const uint8_t *blk = grp + q * 32 * base;
    svint8_t v0, v1, v2, v3;
    if (base == 4) {
        svint8x2_t lo = svluti4_lane_zt_s8_x2(0, svld1_u8(all, blk), 0);
        svint8x2_t hi = svluti4_lane_zt_s8_x2(0, svld1_u8(all, blk + VLB), 0);
        v0 = svget2(lo, 0), v1 = svget2(lo, 1), v2 = svget2(hi, 0), v3 = svget2(hi, 1);
    } else {
        svint8x4_t w = svluti2_lane_zt_s8_x4(0, svld1_u8(all, blk), 0);
        v0 = svget4(w, 0), v1 = svget4(w, 1), v2 = svget4(w, 2), v3 = svget4(w, 3);
    }
    for (int p = 0; p < planes; p++) {
        const uint8_t *pl = grp + 32 * base * kq + 32 * (p * kq + q);
        const svint8_t add = svdup_n_s8((int8_t)(1 << (base + p)));
        v0 = svadd_s8_m(*(const svbool_t *)(const void *)pl, v0, add);
        v1 = svadd_s8_m(*(const svbool_t *)(const void *)(pl + 8), v1, add);
        v2 = svadd_s8_m(*(const svbool_t *)(const void *)(pl + 16), v2, add);
        v3 = svadd_s8_m(*(const svbool_t *)(const void *)(pl + 24), v3, add);
    }
    return svcreate4(v0, v1, v2, v3);
}

__arm_locally_streaming __arm_new("za") __arm_new("zt0")
static void gemv_body(int form, const uint8_t *panels, const uint8_t *zt0, const int8_t *a, int64_t m, int64_t nsb,
                      int64_t k, int64_t G, int32_t *P) {
    if (ppk_panel_forms[form].uses_zt0)
        load_zt0(zt0);
    const int64_t ng = k / G, kq = G / 4, kgb = ppk_panel_forms[form].kg_bytes;
    const svbool_t all = svptrue_b8(), all32 = svptrue_b32();
    for (int64_t row = 0; row < m; row++) {
        const int8_t *arow = a + row * k;
        for (int64_t sb = 0; sb < nsb; sb++) {
            for (int64_t g0 = 0; g0 < ng; g0 += 16) {
                const int64_t gn = ng - g0 < 16 ? ng - g0 : 16;
                svzero_za();
                for (int64_t s = 0; s < gn; s++) {
                    const int64_t g = g0 + s;
                    const uint8_t *grp = panels + (sb * ng + g) * kq * kgb;
                    const int8_t *act = arow + g * G;
                    for (int64_t q = 0; q < kq; q += 4) {
                        svint8_t z = svld1rq_s8(all, act + 4 * q);
                        svdot_lane_za32_s8_vg1x4((uint32_t)s, expand(form, grp, q, kq), z, 0);
                        svdot_lane_za32_s8_vg1x4((uint32_t)s, expand(form, grp, q + 1, kq), z, 1);
                        svdot_lane_za32_s8_vg1x4((uint32_t)s, expand(form, grp, q + 2, kq), z, 2);
                        svdot_lane_za32_s8_vg1x4((uint32_t)s, expand(form, grp, q + 3, kq), z, 3);
                    }
                }
                for (int64_t s = 0; s < gn; s++) {
                    svint32x4_t r = svread_za32_s32_vg1x4((uint32_t)s);
                    int32_t *out = P + ((row * nsb + sb) * ng + g0 + s) * PPK_CHANNELS;
                    svst1_s32(all32, out, svget4(r, 0));
                    svst1_s32(all32, out + 16, svget4(r, 1));
                    svst1_s32(all32, out + 32, svget4(r, 2));
                    svst1_s32(all32, out + 48, svget4(r, 3));
                }
            }
        }
    }
}

void ppk_sme2_gemv(int form, const uint8_t *panels, const uint8_t *zt0, const int8_t *a, int64_t m, int64_t nsb,
                   int64_t k, int64_t G, int32_t *P) {
    gemv_body(form, panels, zt0, a, m, nsb, k, G, P);
}

/* Packed activations of one 16-row tile: apk[g][q][i][c] = a[16mt + i][gG + 4q + c], rows >= M zero. */
static void pack_tile(const int8_t *a, int64_t m, int64_t k, int64_t mt, int8_t *apk) {
    for (int64_t kk = 0; kk < k; kk += 4)
        for (int64_t i = 0; i < ROWS; i++) {
            int64_t row = ROWS * mt + i;
            for (int64_t c = 0; c < 4; c++)
                apk[(kk / 4) * 64 + 4 * i + c] = row < m ? a[row * k + kk + c] : 0;
        }
}

#define SMOPA_STORE(t)                                                                        \
    for (int64_t i = 0; i < rows; i++)                                                        \
        svst1_hor_za32(t, (uint32_t)i, all32, out + (i * nsb * ng) * PPK_CHANNELS + 16 * (t))

__arm_locally_streaming __arm_new("za") __arm_new("zt0")
static void gemm_body(int form, const uint8_t *panels, const uint8_t *zt0, const int8_t *apk, int64_t rows,
                      int64_t nsb, int64_t k, int64_t G, int32_t *Ptile) {
    if (ppk_panel_forms[form].uses_zt0)
        load_zt0(zt0);
    const int64_t ng = k / G, kq = G / 4, kgb = ppk_panel_forms[form].kg_bytes;
    const svbool_t all = svptrue_b8(), all32 = svptrue_b32();
    const svbool_t pa = svwhilelt_b8_s64(0, 4 * rows); /* the M tail: bytes of rows >= M inactive */
    for (int64_t sb = 0; sb < nsb; sb++) {
        for (int64_t g = 0; g < ng; g++) {
            const uint8_t *grp = panels + (sb * ng + g) * kq * kgb;
            const int8_t *act = apk + g * kq * VLB;
            svzero_za();
            for (int64_t q = 0; q < kq; q++, act += VLB) {
                svint8_t av = svld1_s8(pa, act);
                svint8x4_t w = expand(form, grp, q, kq);
                svmopa_za32_s8_m(0, pa, all, av, svget4(w, 0));
                svmopa_za32_s8_m(1, pa, all, av, svget4(w, 1));
                svmopa_za32_s8_m(2, pa, all, av, svget4(w, 2));
                svmopa_za32_s8_m(3, pa, all, av, svget4(w, 3));
            }
            int32_t *out = Ptile + (sb * ng + g) * PPK_CHANNELS;
            SMOPA_STORE(0);
            SMOPA_STORE(1);
            SMOPA_STORE(2);
            SMOPA_STORE(3);
        }
    }
}

void ppk_sme2_gemm(int form, const uint8_t *panels, const uint8_t *zt0, const int8_t *a, int64_t m, int64_t nsb,
                   int64_t k, int64_t G, int32_t *P) {
    int8_t *apk = malloc((size_t)k * ROWS);
    if (!apk)
        abort();
    for (int64_t mt = 0; mt * ROWS < m; mt++) {
        const int64_t rows = m - ROWS * mt < ROWS ? m - ROWS * mt : ROWS;
        pack_tile(a, m, k, mt, apk);
        gemm_body(form, panels, zt0, apk, rows, nsb, k, G, P + ROWS * mt * nsb * (k / G) * PPK_CHANNELS);
    }
    free(apk);
}
