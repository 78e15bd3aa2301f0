/* avx2_il8.c: the 8-row interleaved kernels in AVX2, P in row order [M][N][K/32]
 * (docs/FORMAT.md §4.3-4.5; the byte maps are drawn in neon_il8.c). MIT. Build: -mavx2.
 *
 * The int8 dot is AVX2's usual pair: maddubs(|w|, sign(a, w)) sums adjacent u8 x s8 products
 * into int16 (|w| <= 8 and |a| <= 127, so no saturation; activations are Q8_0 codes, never
 * -128), madd with ones sums pairs into int32: one int32 per 4 bytes. Unsigned codes (Q4_K)
 * go into maddubs directly.
 *   il8-nibble: a 32-byte load is steps 2j, 2j+1 ([4 rows][4 K] each), so lane i of the int32
 *     result is row i % 4 of step 2j + i / 4; the two 128-bit halves are added at the end.
 *   il8-int8:   a 32-byte load is one step, lane i = row i.
 *   ggml-x8:    a 32-byte load is rows 4t .. 4t+3 x 8 bytes; two int32 per row, added pairwise
 *     (hadd) at the end.
 */
#include <immintrin.h>

#include "panelpack.h"

static inline __m256i dot_ss(__m256i w, __m256i a) { /* signed w x signed a, 4-byte sums */
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)), _mm256_set1_epi16(1));
}

static inline __m256i dot_us(__m256i u, __m256i a) { /* unsigned u (< 128) x signed a */
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1));
}

static inline int32_t ld32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline int64_t ld64(const int8_t *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* 8 int32 lanes (rows 0..7) to P[row][.] with the given row stride */
static inline void put8(__m256i v, int32_t *dst, int64_t stride) {
    int32_t t[8];
    _mm256_storeu_si256((__m256i *)t, v);
    for (int r = 0; r < 8; r++)
        dst[r * stride] = t[r];
}

/* rows 0-3 in 128-bit half 0 and again in half 1 (two steps) -> rows 0-3 in the low half */
static inline __m128i fold(__m256i v) { return _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)); }

/* [r0a r0b r1a r1b r2a r2b r3a r3b] (rows 0-3) and the same for rows 4-7 -> rows 0..7 */
static inline __m256i pairs8(__m256i lo4, __m256i hi4) {
    return _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(lo4, hi4), _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
}

static void avx2_il8_nibble(PPK_IL8_UNIT_ARGS) {
    const int64_t nb = k / 32;
    const __m256i low4 = _mm256_set1_epi8(15), off = _mm256_set1_epi8((char)offset);
    __m256i lo[4], hi[4];
    for (int j = 0; j < 4; j++) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(blk + 32 * j));
        lo[j] = _mm256_sub_epi8(_mm256_and_si256(x, low4), off);
        hi[j] = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(x, 4), low4), off);
    }
    for (int64_t mm = 0; mm < m; mm++) {
        const __m256i ab = _mm256_loadu_si256((const __m256i *)(a + mm * k + 32 * u));
        __m256i accl = _mm256_setzero_si256(), acch = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i av = _mm256_permutevar8x32_epi32(
                ab, _mm256_setr_epi32(2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1));
            accl = _mm256_add_epi32(accl, dot_ss(lo[j], av));
            acch = _mm256_add_epi32(acch, dot_ss(hi[j], av));
        }
        put8(_mm256_set_m128i(fold(acch), fold(accl)), P + (mm * n + 8 * sr) * nb + u, nb);
    }
}

static void avx2_il8_int8(PPK_IL8_UNIT_ARGS) {
    (void)offset;
    const int64_t nb = k / 32;
    for (int64_t mm = 0; mm < m; mm++) {
        const int8_t *am = a + mm * k + 32 * u;
        __m256i acc = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++)
            acc = _mm256_add_epi32(acc, dot_ss(_mm256_loadu_si256((const __m256i *)(blk + 32 * g)),
                                               _mm256_set1_epi32(ld32(am + 4 * g))));
        put8(acc, P + (mm * n + 8 * sr) * nb + u, nb);
    }
}

static void avx2_x8_q4_0(PPK_IL8_UNIT_ARGS) {
    (void)offset;
    const int64_t nb = k / 32;
    const __m256i low4 = _mm256_set1_epi8(15);
    const __m256i int4 = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1,
                                          0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
    const uint8_t *qs = blk + 16;
    __m256i lo[4], hi[4]; /* index 2h + t: rows 4t .. 4t+3 of half h */
    for (int i = 0; i < 4; i++) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(qs + 32 * i));
        lo[i] = _mm256_shuffle_epi8(int4, _mm256_and_si256(x, low4));
        hi[i] = _mm256_shuffle_epi8(int4, _mm256_and_si256(_mm256_srli_epi16(x, 4), low4));
    }
    for (int64_t mm = 0; mm < m; mm++) {
        const int8_t *am = a + mm * k + 32 * u;
        __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int h = 0; h < 2; h++) {
            const __m256i al = _mm256_set1_epi64x(ld64(am + 8 * h)), ah = _mm256_set1_epi64x(ld64(am + 8 * h + 16));
            for (int t = 0; t < 2; t++)
                acc[t] = _mm256_add_epi32(acc[t], _mm256_add_epi32(dot_ss(lo[2 * h + t], al), dot_ss(hi[2 * h + t], ah)));
        }
        put8(pairs8(acc[0], acc[1]), P + (mm * n + 8 * sr) * nb + u, nb);
    }
}

static void avx2_x8_q4_k(PPK_IL8_UNIT_ARGS) {
    (void)offset;
    const int64_t ng = k / 32;
    const __m256i low4 = _mm256_set1_epi8(15);
    const uint8_t *qs = blk + 128;
    for (int64_t mm = 0; mm < m; mm++) {
        const int8_t *am = a + mm * k + 256 * u;
        int32_t *out = P + (mm * n + 8 * sr) * ng + 8 * u;
        for (int c = 0; c < 4; c++) {
            __m256i accl[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, acch[2] = {accl[0], accl[1]};
            for (int hh = 0; hh < 4; hh++) {
                const uint8_t *row = qs + 64 * (4 * c + hh);
                const __m256i al = _mm256_set1_epi64x(ld64(am + 64 * c + 8 * hh));
                const __m256i ah = _mm256_set1_epi64x(ld64(am + 64 * c + 32 + 8 * hh));
                for (int t = 0; t < 2; t++) {
                    __m256i x = _mm256_loadu_si256((const __m256i *)(row + 32 * t));
                    accl[t] = _mm256_add_epi32(accl[t], dot_us(_mm256_and_si256(x, low4), al));
                    acch[t] = _mm256_add_epi32(acch[t], dot_us(_mm256_and_si256(_mm256_srli_epi16(x, 4), low4), ah));
                }
            }
            put8(pairs8(accl[0], accl[1]), out + 2 * c, ng);
            put8(pairs8(acch[0], acch[1]), out + 2 * c + 1, ng);
        }
    }
}

PPK_IL8_DEFINE(avx2)
