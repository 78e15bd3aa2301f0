/* isa_diff.c: single SME2 instructions on given register contents, for the instruction-level
 * differential test of panelpack's emulator (tests/test_native_isa.py). MIT.
 *
 *   isa_diff KIND IN OUT     KIND: luti4 ld1rqb sdot smopa zaread
 *
 * IN holds fixed-size records (sizes below, little-endian); OUT gets one result record per input
 * record. A predicate is given as one byte per predicate bit (0 or 1), bit b governing byte b of
 * a vector, exactly the emulator's P[p, :] row.
 */
#include <arm_sme.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VL 64
#define ZA_BYTES (VL * VL)

__attribute__((noinline)) static void load_zt0(const uint8_t *t) __arm_streaming __arm_out("zt0") __arm_preserves("za") {
    svldr_zt(0, t);
}

static inline __attribute__((always_inline)) svbool_t pred(const uint8_t *bits) __arm_streaming {
    return svcmpne_n_u8(svptrue_b8(), svld1_u8(svptrue_b8(), bits), 0);
}

static void za_load(const uint8_t *za) __arm_streaming __arm_inout("za") {
    for (uint32_t v = 0; v < VL; v++)
        svldr_za(v, za + VL * v);
}

static void za_store(uint8_t *za) __arm_streaming __arm_in("za") {
    for (uint32_t v = 0; v < VL; v++)
        svstr_za(v, za + VL * v);
}

/* luti4: in zt0[64] zn[64] esize_code idx (130 B) -> out 2 registers (128 B) */
#define LUTI(T, t, i)                                                             \
    {                                                                             \
        T r = svluti4_lane_zt_##t##_x2(0, zn, i);                                 \
        svst1(svptrue_b8(), (uint8_t *)out, svreinterpret_u8(svget2(r, 0)));      \
        svst1(svptrue_b8(), (uint8_t *)out + VL, svreinterpret_u8(svget2(r, 1))); \
    }
__arm_locally_streaming __arm_new("za") __arm_new("zt0") static void luti4(const uint8_t *in, uint8_t *out) {
    load_zt0(in);
    svuint8_t zn = svld1_u8(svptrue_b8(), in + 64);
    int code = in[128], idx = in[129];
    if (code == 0) {
        if (idx == 0) LUTI(svuint8x2_t, u8, 0) else LUTI(svuint8x2_t, u8, 1)
    } else if (code == 1) {
        if (idx == 0) LUTI(svuint16x2_t, u16, 0) else LUTI(svuint16x2_t, u16, 1)
    } else {
        switch (idx) {
        case 0: LUTI(svuint32x2_t, u32, 0) break;
        case 1: LUTI(svuint32x2_t, u32, 1) break;
        case 2: LUTI(svuint32x2_t, u32, 2) break;
        default: LUTI(svuint32x2_t, u32, 3) break;
        }
    }
}

/* ld1rqb: in mem[16] pred[16] (32 B) -> out z (64 B) */
__arm_locally_streaming static void ld1rqb(const uint8_t *in, uint8_t *out) {
    uint8_t bits[VL] = {0};
    memcpy(bits, in + 16, 16);
    svst1(svptrue_b8(), out, svld1rq_u8(pred(bits), in));
}

/* sdot: in ZA[4096] zn[4][64] zm[64] wv(u32) idx(u8) (4101 B) -> out ZA (4096 B) */
__arm_locally_streaming __arm_new("za") static void sdot_body(const uint8_t *in, uint8_t *out, uint32_t wv) {
    za_load(in);
    const int8_t *z = (const int8_t *)in + ZA_BYTES;
    svbool_t all = svptrue_b8();
    svint8x4_t zn = svcreate4(svld1_s8(all, z), svld1_s8(all, z + VL), svld1_s8(all, z + 2 * VL), svld1_s8(all, z + 3 * VL));
    svint8_t zm = svld1_s8(all, z + 4 * VL);
    switch (in[ZA_BYTES + 5 * VL + 4]) {
    case 0: svdot_lane_za32_s8_vg1x4(wv, zn, zm, 0); break;
    case 1: svdot_lane_za32_s8_vg1x4(wv, zn, zm, 1); break;
    case 2: svdot_lane_za32_s8_vg1x4(wv, zn, zm, 2); break;
    default: svdot_lane_za32_s8_vg1x4(wv, zn, zm, 3); break;
    }
    za_store(out);
}

static void sdot(const uint8_t *in, uint8_t *out) { /* no call (memcpy) inside a ZA function */
    uint32_t wv;
    memcpy(&wv, in + ZA_BYTES + 5 * VL, 4);
    sdot_body(in, out, wv);
}

/* smopa: in ZA[4096] zn[64] zm[64] pn[64] pm[64] tile(u8) (4353 B) -> out ZA */
__arm_locally_streaming __arm_new("za") static void smopa(const uint8_t *in, uint8_t *out) {
    za_load(in);
    const uint8_t *r = in + ZA_BYTES;
    svint8_t zn = svld1_s8(svptrue_b8(), (const int8_t *)r), zm = svld1_s8(svptrue_b8(), (const int8_t *)r + VL);
    svbool_t pn = pred(r + 2 * VL), pm = pred(r + 3 * VL);
    switch (r[4 * VL]) {
    case 0: svmopa_za32_s8_m(0, pn, pm, zn, zm); break;
    case 1: svmopa_za32_s8_m(1, pn, pm, zn, zm); break;
    case 2: svmopa_za32_s8_m(2, pn, pm, zn, zm); break;
    default: svmopa_za32_s8_m(3, pn, pm, zn, zm); break;
    }
    za_store(out);
}

/* zaread: in ZA[4096] wv(u32) slice(u32) tile(u8) pg[64] zd[64] mem[64] (4301 B) ->
 * out: MOVA {4 vectors}, ZA.D[wv, 0, VGx4] (256 B); ST1W ZA<tile>H.S[slice] to mem (64 B);
 * MOVA zd.S, pg/M, ZA<tile>H.S[slice] (64 B) */
#define TILE_READS(t)                                                                      \
    svst1_hor_za32(t, slice, pg, mem);                                                     \
    zd = svread_hor_za32_s32_m(zd, pg, t, slice)
__arm_locally_streaming __arm_new("za") static void zaread_body(const uint8_t *in, uint8_t *out, uint32_t wv,
                                                                  uint32_t slice) {
    za_load(in);
    const uint8_t *r = in + ZA_BYTES;
    svbool_t pg = pred(r + 9);
    svint32_t zd = svld1_s32(svptrue_b32(), (const int32_t *)(r + 9 + VL));
    uint8_t *mem = out + 4 * VL;
    svint32x4_t v = svread_za32_s32_vg1x4(wv);
    svst1_s32(svptrue_b32(), (int32_t *)out, svget4(v, 0));
    svst1_s32(svptrue_b32(), (int32_t *)(out + VL), svget4(v, 1));
    svst1_s32(svptrue_b32(), (int32_t *)(out + 2 * VL), svget4(v, 2));
    svst1_s32(svptrue_b32(), (int32_t *)(out + 3 * VL), svget4(v, 3));
    switch (r[8]) {
    case 0: TILE_READS(0); break;
    case 1: TILE_READS(1); break;
    case 2: TILE_READS(2); break;
    default: TILE_READS(3); break;
    }
    svst1_s32(svptrue_b32(), (int32_t *)(out + 5 * VL), zd);
}

static void zaread(const uint8_t *in, uint8_t *out) {
    uint32_t wv, slice;
    memcpy(&wv, in + ZA_BYTES, 4);
    memcpy(&slice, in + ZA_BYTES + 4, 4);
    memcpy(out + 4 * VL, in + ZA_BYTES + 9 + 2 * VL, VL); /* the memory ST1W writes into */
    zaread_body(in, out, wv, slice);
}

typedef struct { const char *name; size_t in, out; void (*fn)(const uint8_t *, uint8_t *); } kind_t;
static const kind_t KINDS[] = {
    {"luti4", 130, 128, luti4},
    {"ld1rqb", 32, 64, ld1rqb},
    {"sdot", ZA_BYTES + 5 * VL + 5, ZA_BYTES, sdot},
    {"smopa", ZA_BYTES + 4 * VL + 1, ZA_BYTES, smopa},
    {"zaread", ZA_BYTES + 9 + 3 * VL, 6 * VL, zaread},
};

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: isa_diff KIND IN OUT\n");
        return 2;
    }
    const kind_t *k = 0;
    for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++)
        if (!strcmp(KINDS[i].name, argv[1]))
            k = &KINDS[i];
    FILE *fi = fopen(argv[2], "rb"), *fo = fopen(argv[3], "wb");
    if (!k || !fi || !fo) {
        fprintf(stderr, "isa_diff: bad kind or file\n");
        return 2;
    }
    uint8_t *in = malloc(k->in), *out = malloc(k->out);
    while (fread(in, 1, k->in, fi) == k->in) {
        memset(out, 0, k->out);
        k->fn(in, out);
        fwrite(out, 1, k->out, fo);
    }
    fclose(fi);
    return fclose(fo) != 0;
}
