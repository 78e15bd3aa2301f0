/* layouts.c: the type table, the panel64 form table, and each layout's scale bytes read into the
 * factors s, o of docs/FORMAT.md §3. Portable C, MIT. Build with -ffp-contract=off (the K-quant
 * factors are f32 products, exact by §2.3, but kept unfused like the rescale).
 */
#include "panelpack.h"

const ppk_panel_form_info ppk_panel_forms[PPK_FORM_COUNT] = {
    [PPK_FORM_NIBBLE] = {"nibble", 128, 1, 4, 0},
    [PPK_FORM_INT8] = {"int8", 256, 0, 8, 0},
    [PPK_FORM_C4P1] = {"compact", 160, 1, 4, 1},
    [PPK_FORM_C4P2] = {"compact", 192, 1, 4, 2},
    [PPK_FORM_C2P0] = {"compact", 64, 1, 2, 0},
    [PPK_FORM_C2P1] = {"compact", 96, 1, 2, 1},
};

static const ppk_type_info TYPES[] = {
    {"Q4_0", 32, PPK_SCALE, PPK_S_D, PPK_FORM_NIBBLE, PPK_FORM_NIBBLE},
    {"Q4_1", 32, PPK_SCALE_MIN, PPK_S_D_M, PPK_FORM_NIBBLE, PPK_FORM_NIBBLE},
    {"Q4_K", 32, PPK_K_SCALE_MIN, PPK_S_K_MIN, PPK_FORM_NIBBLE, PPK_FORM_NIBBLE},
    {"Q5_0", 32, PPK_SCALE, PPK_S_D, PPK_FORM_INT8, PPK_FORM_C4P1},
    {"Q5_1", 32, PPK_SCALE_MIN, PPK_S_D_M, PPK_FORM_INT8, PPK_FORM_C4P1},
    {"Q5_K", 32, PPK_K_SCALE_MIN, PPK_S_K_MIN, PPK_FORM_INT8, PPK_FORM_C4P1},
    {"Q6_K", 16, PPK_SCALE, PPK_S_K_I8, PPK_FORM_INT8, PPK_FORM_C4P2},
    {"Q8_0", 32, PPK_SCALE, PPK_S_D, PPK_FORM_INT8, PPK_FORM_INT8},
    {"Q2_K", 16, PPK_K_SCALE_MIN, PPK_S_K_MIN, PPK_FORM_INT8, PPK_FORM_C2P0},
    {"Q3_K", 16, PPK_SCALE, PPK_S_K_U8, PPK_FORM_INT8, PPK_FORM_C2P1},
};

const ppk_type_info *ppk_type(const char *name) {
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (!strcmp(TYPES[i].name, name))
            return &TYPES[i];
    return 0;
}

/* panel64: value at [sb][x][ch] belongs to channel 64sb + ch, group (or 256-K super-block) x */
void ppk_panel64_scales(const ppk_type_info *t, const ppk_scale_fields *f, int64_t n, int64_t k, float *s, float *o) {
    const int64_t ng = k / t->G, nsb = k / 256, per = 256 / t->G;
    for (int64_t nn = 0; nn < n; nn++) {
        const int64_t sb = nn / PPK_CHANNELS, ch = nn % PPK_CHANNELS;
        for (int64_t g = 0; g < ng; g++) {
            const int64_t gi = (sb * ng + g) * PPK_CHANNELS + ch;
            const int64_t si = (sb * nsb + g / per) * PPK_CHANNELS + ch; /* K-quants only */
            float sv = 0.0f, ov = 0.0f;
            switch (t->source) {
            case PPK_S_D: sv = ppk_f16(f->d[gi]); break;
            case PPK_S_D_M: sv = ppk_f16(f->d[gi]); ov = ppk_f16(f->m[gi]); break;
            case PPK_S_K_MIN:
                sv = ppk_f16(f->d[si]) * (float)f->sc[gi];
                ov = ppk_f16(f->dmin[si]) * (float)f->mins[gi];
                break;
            case PPK_S_K_I8: sv = ppk_f16(f->d[si]) * (float)f->scale[gi]; break;
            default: sv = ppk_f16(f->d[si]) * (float)((int)f->sc[gi] - 32); break;
            }
            s[nn * ng + g] = sv;
            o[nn * ng + g] = ov;
        }
    }
}

void ppk_il8_scales(const float *scales, const float *mins, int64_t n, int64_t k, float *s, float *o) {
    const int64_t nb = k / 32;
    for (int64_t nn = 0; nn < n; nn++)
        for (int64_t b = 0; b < nb; b++) {
            const int64_t at = ((nn / 8) * nb + b) * 8 + nn % 8;
            s[nn * nb + b] = scales[at];
            o[nn * nb + b] = mins ? mins[at] : 0.0f;
        }
}

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* block_q4_0x8, 144 B per (super-row, block): d[r] f16 at bytes 2r, then the codes */
void ppk_x8_q4_0_scales(const uint8_t *blocks, int64_t n, int64_t k, float *s, float *o) {
    const int64_t nb = k / 32;
    for (int64_t nn = 0; nn < n; nn++)
        for (int64_t b = 0; b < nb; b++) {
            s[nn * nb + b] = ppk_f16(le16(blocks + ((nn / 8) * nb + b) * 144 + 2 * (nn % 8)));
            o[nn * nb + b] = 0.0f;
        }
}

/* block_q4_Kx8, 1152 B per (super-row, 256 K): d[r] @ 2r, dmin[r] @ 16 + 2r, then 8 groups of
 * 12 bytes, group j = sub-block j of the 8 rows, packed with §2.2's rule whose slot r is row r:
 *   r < 4:  sc = b[r] & 63,                          m = b[r+4] & 63
 *   r >= 4: sc = (b[r+4] & 15) | (b[r-4] >> 6) << 4, m = (b[r+4] >> 4) | (b[r] >> 6) << 4 */
void ppk_x8_q4_k_scales(const uint8_t *blocks, int64_t n, int64_t k, float *s, float *o) {
    const int64_t nsb = k / 256, ng = k / 32;
    for (int64_t nn = 0; nn < n; nn++) {
        const int64_t r = nn % 8;
        for (int64_t j = 0; j < nsb; j++) {
            const uint8_t *blk = blocks + ((nn / 8) * nsb + j) * 1152;
            const float d = ppk_f16(le16(blk + 2 * r)), dmin = ppk_f16(le16(blk + 16 + 2 * r));
            for (int64_t sub = 0; sub < 8; sub++) {
                const uint8_t *b = blk + 32 + 12 * sub;
                int sc, mn;
                if (r < 4) {
                    sc = b[r] & 63;
                    mn = b[r + 4] & 63;
                } else {
                    sc = (b[r + 4] & 15) | (b[r - 4] >> 6) << 4;
                    mn = (b[r + 4] >> 4) | (b[r] >> 6) << 4;
                }
                s[nn * ng + 8 * j + sub] = d * (float)sc;
                o[nn * ng + 8 * j + sub] = dmin * (float)mn;
            }
        }
    }
}
