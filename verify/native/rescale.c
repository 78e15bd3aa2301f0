/* rescale.c: docs/FORMAT.md §3 step 3 in plain C, and the layouts' scale regions read into the
 * per-(channel, group) factors s, o. MIT. Build with -ffp-contract=off: every product and sum is
 * rounded on its own, in the order written (an FMA would change the last bits).
 */
#include "panelpack.h"

void ppk_rescale(int scheme, const int32_t *P, const int32_t *A, const float *s, const float *o, const float *da,
                 int64_t m, int64_t n, int64_t ng, int64_t G, float *y) {
    const int64_t nda = ng * G / 32;
    for (int64_t mm = 0; mm < m; mm++) {
        for (int64_t nn = 0; nn < n; nn++) {
            const int32_t *p = P + (mm * n + nn) * ng;
            const float *sn = s + nn * ng, *on = o + nn * ng;
            float acc = 0.0f;
            for (int64_t g = 0; g < ng; g++) {
                const float pf = (float)p[g], d = da[mm * nda + (g * G) / 32];
                if (scheme == PPK_SCALE_MIN)
                    acc = acc + ((pf * sn[g]) * d + (on[g] * (float)A[mm * ng + g]) * d);
                else if (scheme == PPK_K_SCALE_MIN)
                    acc = acc + ((sn[g] * pf) - (on[g] * (float)A[mm * ng + g])) * d;
                else
                    acc = acc + (pf * sn[g]) * d;
            }
            y[mm * n + nn] = acc;
        }
    }
}

void ppk_group_sums(const int8_t *a, int64_t m, int64_t k, int64_t G, int32_t *A) {
    for (int64_t mm = 0; mm < m; mm++)
        for (int64_t g = 0; g < k / G; g++) {
            int32_t sum = 0;
            for (int64_t j = 0; j < G; j++)
                sum += a[mm * k + g * G + j];
            A[mm * (k / G) + g] = sum;
        }
}

void ppk_panel_to_rows(const int32_t *Ppanel, int64_t m, int64_t n, int64_t ng, int32_t *P) {
    const int64_t nsb = (n + PPK_CHANNELS - 1) / PPK_CHANNELS;
    for (int64_t mm = 0; mm < m; mm++)
        for (int64_t nn = 0; nn < n; nn++)
            for (int64_t g = 0; g < ng; g++)
                P[(mm * n + nn) * ng + g] =
                    Ppanel[((mm * nsb + nn / PPK_CHANNELS) * ng + g) * PPK_CHANNELS + nn % PPK_CHANNELS];
}
