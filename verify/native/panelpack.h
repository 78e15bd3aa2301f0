/* panelpack.h: reference kernels for panelpack bundles (docs/FORMAT.md), MIT.
 *
 * One header a runtime can vendor. It declares the integer leaves (int32 partials P of
 * docs/FORMAT.md §3 step 2, bit-exact) and the plain-C rescale (§3 step 3, f32, every
 * operation rounded on its own: build the rescale with -ffp-contract=off). The sources beside it
 * (sme2_panel.c, neon_panel.c, neon_il8.c, avx2_il8.c, rescale.c) are one file per instruction
 * set; take the ones your target has.
 *
 * Shapes: N output channels, K inputs, M activation rows; G the type's scale group (32, or 16 for
 * Q6_K, Q3_K, Q2_K); ng = K / G. Activations are int8 a[M][K] (Q8_0 codes, §3 step 1) with one
 * f32 scale da[M][K/32] per 32 K.
 *
 * Partials orders:
 *   "panel order"  P[m][sb][g][64]  (panel64 leaves: one 64-channel super-block sb = channels
 *                   64sb .. 64sb+63 at a time, pad channels >= N included, their partials 0)
 *   "row order"    P[m][n][g]       (the 8-row interleaved kernels; the rescale's input)
 */
#ifndef PANELPACK_H
#define PANELPACK_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- panel64 (§4.2): 64 channels per super-block, kg-blocks of 4 K, ordered [SB][ng][G/4] ---- */
#define PPK_CHANNELS 64

/* The code forms a panel64 tensor can hold. A form is how one kg-block's bytes become four
 * vectors of 16 channels x 4 K int8 (the expanded order, byte 64v + 4(ch % 16) + j = channel
 * 16v + ch % 16, K offset j). A new form is one expand step in each leaf and one row of
 * ppk_panel_forms (layouts.c). */
enum ppk_panel_form {
    PPK_FORM_NIBBLE = 0, /* 128 B: byte 2ch = u(k0) | u(k1) << 4, byte 2ch+1 = u(k2) | u(k3) << 4; ZT0 maps u -> int8 */
    PPK_FORM_INT8 = 1,   /* 256 B: already expanded, the signed integer code c */
    /* panel64-compact (§4.2.1): per group a record of kq base kg-blocks (32·B bytes each: LUTI4
     * nibbles or LUTI2 crumbs, ZT0 maps them to the base value), then per bit plane kq x 32 bytes
     * (the predicates of the four vectors, added 2^(B+p) where set) */
    PPK_FORM_C4P1 = 2,   /* Q5_0, Q5_1, Q5_K: B = 4, bit 4 */
    PPK_FORM_C4P2 = 3,   /* Q6_K: B = 4, bits 4, 5 */
    PPK_FORM_C2P0 = 4,   /* Q2_K: B = 2 */
    PPK_FORM_C2P1 = 5,   /* Q3_K: B = 2, bit 2 */
    PPK_FORM_COUNT
};

typedef struct {
    const char *name;   /* as docs/FORMAT.md and the manifest's params["code_form"] spell it */
    int kg_bytes;       /* bytes of one kg-block (4 K x 64 channels); of a compact record: kq x this */
    int uses_zt0;       /* the 64-byte ZT0 table of params["zt0"] is read */
    int base_bits;      /* compact forms (and nibble: 4, no planes): bits of the base plane */
    int planes;         /* compact forms: bit planes after the base kg-blocks */
} ppk_panel_form_info;

extern const ppk_panel_form_info ppk_panel_forms[PPK_FORM_COUNT];

/* The panel leaves: P in panel order for the nsb super-blocks of the panels given (channels
 * 0 .. 64 nsb - 1 of those bytes; n <= 64 nsb real ones). zt0 may be NULL for int8 panels.
 * G a multiple of 16, K a multiple of G. */
typedef void (*ppk_panel_leaf)(int form, const uint8_t *panels, const uint8_t *zt0, const int8_t *a,
                               int64_t m, int64_t nsb, int64_t k, int64_t G, int32_t *P);

/* SME2 at a 512-bit streaming vector length (check ppk_sme2_svl_bytes() == 64 first):
 * GEMV = ZT0 + LUTI4 (nibble) or LD1B (int8), LD1RQB activations, SDOT vgx4 into ZA, one row at
 * a time; GEMM = the same expansion + four SMOPA per kg-block on 16-row tiles, M tail
 * predicated off. */
void ppk_sme2_gemv(int form, const uint8_t *panels, const uint8_t *zt0, const int8_t *a,
                   int64_t m, int64_t nsb, int64_t k, int64_t G, int32_t *P);
void ppk_sme2_gemm(int form, const uint8_t *panels, const uint8_t *zt0, const int8_t *a,
                   int64_t m, int64_t nsb, int64_t k, int64_t G, int32_t *P);
int64_t ppk_sme2_svl_bytes(void); /* streaming vector length in bytes (64 at SVL 512) */

/* NEON (FEAT_DotProd) over the same panel bytes: TBL for the nibble table, SDOT by element. */
void ppk_neon_panel(int form, const uint8_t *panels, const uint8_t *zt0, const int8_t *a,
                    int64_t m, int64_t nsb, int64_t k, int64_t G, int32_t *P);

/* ---- the 8-row interleaved layouts (§4.3-4.5): P in row order, G = 32 ---------------------- */
/* il8-nibble: qs [N/8][K/32][128] raw nibbles u, weight u - offset (Q4_0: 8, Q4_K: 0).
 * il8-int8:   qs [N/8][K/32][256] int8 codes (offset ignored).
 * ggml-x8 Q4_0: blocks [N/8][K/32][144] (block_q4_0x8); ggml-x8 Q4_K: blocks [N/8][K/256][1152]
 * (block_q4_Kx8), P per 32-element sub-block. */
typedef void (*ppk_il8_kernel)(const uint8_t *w, const int8_t *a, int64_t m, int64_t n, int64_t k,
                               int offset, int32_t *P);

/* Every ISA's four kernels, ppk_<isa>_il8_nibble, _il8_int8, _x8_q4_0, _x8_q4_k, are one loop
 * over the (super-row sr, unit u) of w [N/8][units][unit bytes] around the ISA's static
 * <isa>_<form>(PPK_IL8_UNIT_ARGS) on the unit at blk; the unit sizes are stated here once:
 * a 32-element block (128, 256, 144 bytes) or, ggml-x8 Q4_K, a 256-element super-block. */
#define PPK_IL8_ARGS const uint8_t *w, const int8_t *a, int64_t m, int64_t n, int64_t k, int offset, int32_t *P
#define PPK_IL8_UNIT_ARGS \
    const uint8_t *blk, const int8_t *a, int64_t m, int64_t n, int64_t k, int64_t sr, int64_t u, int offset, int32_t *P
#define PPK_IL8_FORMS(X, isa) \
    X(isa, il8_nibble, 32, 128) X(isa, il8_int8, 32, 256) X(isa, x8_q4_0, 32, 144) X(isa, x8_q4_k, 256, 1152)
#define PPK_IL8_DECLARE_ONE(isa, form, unit_k, unit_bytes) void ppk_##isa##_##form(PPK_IL8_ARGS);
#define PPK_IL8_DEFINE_ONE(isa, form, unit_k, unit_bytes)                                     \
    void ppk_##isa##_##form(PPK_IL8_ARGS) {                                                     \
        const int64_t nu = k / (unit_k);                                                        \
        for (int64_t sr = 0; sr < n / 8; sr++)                                                  \
            for (int64_t u = 0; u < nu; u++)                                                    \
                isa##_##form(w + (sr * nu + u) * (unit_bytes), a, m, n, k, sr, u, offset, P);    \
    }
/* in <isa>_il8.c, after its four unit functions: */
#define PPK_IL8_DEFINE(isa) PPK_IL8_FORMS(PPK_IL8_DEFINE_ONE, isa)

PPK_IL8_FORMS(PPK_IL8_DECLARE_ONE, avx2)
PPK_IL8_FORMS(PPK_IL8_DECLARE_ONE, neon)
PPK_IL8_FORMS(PPK_IL8_DECLARE_ONE, i8mm)

/* ---- the types and where their scales live (layouts.c) ----------------------------------- */
/* How a type's factors s, o (§3) come from its scale fields (f16 kept as raw bits):
 *   PPK_S_D        s = f32(d)                                   (Q4_0, Q5_0, Q8_0)
 *   PPK_S_D_M      s = f32(d), o = f32(m)                       (Q4_1, Q5_1)
 *   PPK_S_K_MIN    s = f32(d)·f32(sc), o = f32(dmin)·f32(m)     (Q4_K, Q5_K, Q2_K; d, dmin per 256 K)
 *   PPK_S_K_I8     s = f32(d)·f32(scale), scale int8            (Q6_K)
 *   PPK_S_K_U8     s = f32(d)·f32(sc − 32)                      (Q3_K) */
enum ppk_scale_source { PPK_S_D, PPK_S_D_M, PPK_S_K_MIN, PPK_S_K_I8, PPK_S_K_U8 };

typedef struct {
    const char *name;  /* "Q4_0", ... */
    int G;             /* K per scale group */
    int scheme;        /* enum ppk_scheme */
    int source;        /* enum ppk_scale_source */
    int panel_form;    /* the panel64 code form (enum ppk_panel_form) */
    int compact_form;  /* the panel64-compact code form */
} ppk_type_info;

const ppk_type_info *ppk_type(const char *name); /* NULL for a type without an integer form */

/* The scale fields of a tensor, each NULL when the type has none. panel64: group fields
 * [SB][ng][64], super-block fields [SB][K/256][64] (channel order within each 64). */
typedef struct {
    const uint16_t *d, *m, *dmin; /* f16 bits (m: Q4_1, Q5_1) */
    const uint8_t *sc, *mins;     /* the K-quants' sc and m (region "m", uint8) */
    const int8_t *scale;          /* Q6_K */
} ppk_scale_fields;

/* s, o [N][ng] (o all 0 for scale-only types) */
void ppk_panel64_scales(const ppk_type_info *t, const ppk_scale_fields *f, int64_t n, int64_t k, float *s, float *o);
/* il8-nibble / il8-int8: f32 regions [N/8][K/32][8] (Q4_0 "scales"; Q4_K "dsc", "dmn") */
void ppk_il8_scales(const float *scales, const float *mins, int64_t n, int64_t k, float *s, float *o);
/* ggml-x8: the scales inside block_q4_0x8 / block_q4_Kx8 */
void ppk_x8_q4_0_scales(const uint8_t *blocks, int64_t n, int64_t k, float *s, float *o);
void ppk_x8_q4_k_scales(const uint8_t *blocks, int64_t n, int64_t k, float *s, float *o);

/* ---- the rescale (§3 step 3), plain C, rescale.c ------------------------------------------ */
enum ppk_scheme { PPK_SCALE = 0, PPK_SCALE_MIN = 1, PPK_K_SCALE_MIN = 2 };

/* y[m][n] = sum over groups g in increasing order of
 *   PPK_SCALE:        y + (f32(P)*s)*da
 *   PPK_SCALE_MIN:    y + ((f32(P)*s)*da + (o*f32(A))*da)
 *   PPK_K_SCALE_MIN:  y + ((s*f32(P)) - (o*f32(A)))*da
 * P row order [M][N][ng], A[M][ng] the activations' group sums, s/o [N][ng], da[M][K/32]. */
void ppk_rescale(int scheme, const int32_t *P, const int32_t *A, const float *s, const float *o,
                 const float *da, int64_t m, int64_t n, int64_t ng, int64_t G, float *y);

/* A[m][g] = sum of a[m][gG .. gG+G-1] */
void ppk_group_sums(const int8_t *a, int64_t m, int64_t k, int64_t G, int32_t *A);

/* panel order P[m][sb][g][64] -> row order P[m][n][g] for the n real channels */
void ppk_panel_to_rows(const int32_t *Ppanel, int64_t m, int64_t n, int64_t ng, int32_t *P);

/* The exact widening of f16 bits (every f16 and NaN payload has one f32 image). */
static inline float ppk_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal f16: an f32 normal */
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400u));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

#ifdef __cplusplus
}
#endif
#endif /* PANELPACK_H */
