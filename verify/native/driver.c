/* driver.c: runs one leaf on a tensor's regions and activations, writes P and y. MIT.
 *
 * A line-oriented server (stdin -> stdout), so one process (under qemu-aarch64 too) serves a
 * whole verification:
 *
 *   caps                                    -> "caps arch=... sme2=0|1 svl=BYTES dotprod=0|1 i8mm=0|1 avx2=0|1"
 *   run LAYOUT KERNEL TYPE N K M DIR [OUT]  -> "ok" | "error <why>"  (P.bin, y.bin into OUT, else DIR)
 *   bench LAYOUT KERNEL TYPE N K M DIR REPS -> "ok <median seconds of the kernel alone>" | "error <why>"
 *
 * DIR holds the tensor's regions as raw files named <region>.bin (exactly the bytes of the
 * bundle's regions, docs/FORMAT.md §4; for panel64 the regions of the super-blocks to run,
 * N their real channels), a.bin (int8 [M][K]) and da.bin (f32 [M][K/32]). The run writes
 * P.bin (int32 [M][N][ng], row order) and y.bin (f32 [M][N]). KERNEL is one of the names in
 * PANEL_LEAVES / IL8_KERNELS below (e.g. sme2.gemv, neon.panel, avx2.il8, i8mm.x8).
 * The SME2 leaves run only at a 512-bit streaming vector length unless PPK_ANY_SVL=1.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "panelpack.h"

#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1UL << 13)
#endif
#ifndef HWCAP2_SME2
#define HWCAP2_SME2 (1UL << 37)
#endif
#endif

typedef struct { int sme2, svl, dotprod, i8mm, avx2; } caps_t;
static caps_t CAPS;

static void detect(void) {
#if defined(__aarch64__)
    unsigned long h1 = getauxval(AT_HWCAP), h2 = getauxval(AT_HWCAP2);
    CAPS.dotprod = (h1 & HWCAP_ASIMDDP) != 0;
    CAPS.i8mm = (h2 & HWCAP2_I8MM) != 0;
    CAPS.sme2 = (h2 & HWCAP2_SME2) != 0;
    CAPS.svl = CAPS.sme2 ? (int)ppk_sme2_svl_bytes() : 0;
#elif defined(__x86_64__)
    __builtin_cpu_init();
    CAPS.avx2 = __builtin_cpu_supports("avx2") != 0;
#endif
}

/* ---- the kernel tables -------------------------------------------------------------------- */
typedef struct { const char *name; ppk_panel_leaf fn; int *cap; } panel_row;
typedef struct { const char *layout, *kernel, *type; ppk_il8_kernel fn; int offset; int *cap; } il8_row;

static const panel_row PANEL_LEAVES[] = {
#if defined(__aarch64__)
    {"sme2.gemv", ppk_sme2_gemv, &CAPS.sme2},
    {"sme2.gemm", ppk_sme2_gemm, &CAPS.sme2},
    {"neon.panel", ppk_neon_panel, &CAPS.dotprod},
#endif
    {0, 0, 0}};

#define IL8_ROWS(isa, cap)                                                                  \
    {"il8-nibble", #isa ".il8", "Q4_0", ppk_##isa##_il8_nibble, 8, cap},                      \
    {"il8-nibble", #isa ".il8", "Q4_K", ppk_##isa##_il8_nibble, 0, cap},                      \
    {"il8-int8", #isa ".il8", "Q4_0", ppk_##isa##_il8_int8, 0, cap},                          \
    {"ggml-x8", #isa ".x8", "Q4_0", ppk_##isa##_x8_q4_0, 0, cap},                             \
    {"ggml-x8", #isa ".x8", "Q4_K", ppk_##isa##_x8_q4_k, 0, cap}

static const il8_row IL8_KERNELS[] = {
#if defined(__aarch64__)
    IL8_ROWS(neon, &CAPS.dotprod),
    IL8_ROWS(i8mm, &CAPS.i8mm),
#elif defined(__x86_64__)
    IL8_ROWS(avx2, &CAPS.avx2),
#endif
    {0, 0, 0, 0, 0, 0}};

/* ---- files -------------------------------------------------------------------------------- */
static char ERR[4608];

static void *load(const char *dir, const char *name, int64_t want, int optional) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (!optional)
            snprintf(ERR, sizeof ERR, "cannot open %s", path);
        return 0;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (want >= 0 && size != want) {
        snprintf(ERR, sizeof ERR, "%s has %ld bytes, expected %lld", path, size, (long long)want);
        fclose(f);
        return 0;
    }
    void *p = malloc(size ? (size_t)size : 1);
    if (p && fread(p, 1, (size_t)size, f) != (size_t)size) {
        free(p);
        p = 0;
        snprintf(ERR, sizeof ERR, "cannot read %s", path);
    }
    fclose(f);
    return p;
}

static int save(const char *dir, const char *name, const void *p, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, bytes, f) != bytes) {
        snprintf(ERR, sizeof ERR, "cannot write %s", path);
        if (f)
            fclose(f);
        return 0;
    }
    return fclose(f) == 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* ---- one job -------------------------------------------------------------------------------- */
typedef struct {
    const char *layout, *kernel, *type, *dir, *out; /* inputs from dir, P.bin and y.bin to out */
    int64_t n, k, m, reps;
} job_t;

typedef struct {
    void *w;                      /* the code region */
    ppk_scale_fields f;           /* panel64 */
    float *f32a, *f32b;           /* il8 scale regions */
} regions_t;

static void free_regions(regions_t *r) {
    free(r->w);
    free((void *)r->f.d); free((void *)r->f.m); free((void *)r->f.dmin);
    free((void *)r->f.sc); free((void *)r->f.mins); free((void *)r->f.scale);
    free(r->f32a); free(r->f32b);
}

/* Runs the job; returns the kernel's median time (reps > 0) or 0, -1 on error (ERR says why). */
static double run(const job_t *j) {
    const ppk_type_info *t = ppk_type(j->type);
    if (!t) {
        snprintf(ERR, sizeof ERR, "type %s has no integer form", j->type);
        return -1;
    }
    const int64_t n = j->n, k = j->k, m = j->m, G = t->G;
    if (n < 1 || m < 1 || k < 1 || k % 32 || k % G || (t->source >= PPK_S_K_MIN && k % 256)) {
        snprintf(ERR, sizeof ERR, "bad shape N=%lld K=%lld M=%lld for %s", (long long)n, (long long)k, (long long)m, j->type);
        return -1;
    }
    const int64_t ng = k / G, nsb = (n + 63) / 64, ksb = k / 256;
    const panel_row *pr = 0;
    const il8_row *ir = 0;
    const int compact = !strcmp(j->layout, "panel64-compact");
    if (!strcmp(j->layout, "panel64") || compact) {
        for (const panel_row *r = PANEL_LEAVES; r->name; r++)
            if (!strcmp(r->name, j->kernel))
                pr = r;
    } else {
        for (const il8_row *r = IL8_KERNELS; r->layout; r++)
            if (!strcmp(r->layout, j->layout) && !strcmp(r->kernel, j->kernel) && !strcmp(r->type, j->type))
                ir = r;
    }
    if (!pr && !ir) {
        snprintf(ERR, sizeof ERR, "no kernel %s for %s %s in this build", j->kernel, j->layout, j->type);
        return -1;
    }
    if (!*(pr ? pr->cap : ir->cap)) {
        snprintf(ERR, sizeof ERR, "this CPU lacks the instructions of %s", j->kernel);
        return -1;
    }
    if (pr && !strncmp(pr->name, "sme2", 4) && CAPS.svl != PPK_CHANNELS && !getenv("PPK_ANY_SVL")) {
        snprintf(ERR, sizeof ERR, "the SME2 panel leaves need a 512-bit streaming vector length, this CPU has %d bits",
                 8 * CAPS.svl);
        return -1;
    }
    regions_t R;
    memset(&R, 0, sizeof R);
    ERR[0] = 0;
    int8_t *a = load(j->dir, "a", m * k, 0);
    float *da = load(j->dir, "da", m * (k / 32) * 4, 0);
    float *s = malloc(sizeof(float) * n * ng), *o = malloc(sizeof(float) * n * ng);
    int32_t *P = malloc(sizeof(int32_t) * m * n * ng), *A = malloc(sizeof(int32_t) * m * ng);
    float *y = malloc(sizeof(float) * m * n);
    int32_t *Pp = 0;
    double best = -1;
    if (pr) {
        const int form = compact ? t->compact_form : t->panel_form;
        const int64_t grp = nsb * ng * 64, sup = nsb * ksb * 64;
        R.w = load(j->dir, "panels", nsb * ng * (G / 4) * ppk_panel_forms[form].kg_bytes, 0);
        uint8_t *zt0 = ppk_panel_forms[form].uses_zt0 ? load(j->dir, "zt0", 64, 0) : 0;
        int want_d_super = t->source >= PPK_S_K_MIN;
        R.f.d = load(j->dir, "d", 2 * (want_d_super ? sup : grp), 0);
        if (t->source == PPK_S_D_M) R.f.m = load(j->dir, "m", 2 * grp, 0);
        if (t->source == PPK_S_K_MIN) {
            R.f.sc = load(j->dir, "sc", grp, 0);
            R.f.mins = load(j->dir, "m", grp, 0);
            R.f.dmin = load(j->dir, "dmin", 2 * sup, 0);
        }
        if (t->source == PPK_S_K_I8) R.f.scale = load(j->dir, "scale", grp, 0);
        if (t->source == PPK_S_K_U8) R.f.sc = load(j->dir, "sc", grp, 0);
        Pp = malloc(sizeof(int32_t) * m * nsb * ng * 64);
        if (!ERR[0] && a && da && Pp && (zt0 || !ppk_panel_forms[form].uses_zt0)) {
            int64_t reps = j->reps > 0 ? j->reps : 1;
            double *times = malloc(sizeof(double) * reps);
            for (int64_t r = 0; r < reps; r++) {
                double t0 = now();
                pr->fn(form, R.w, zt0, a, m, nsb, k, G, Pp);
                times[r] = now() - t0;
            }
            qsort(times, reps, sizeof(double), cmp_double);
            best = j->reps > 0 ? times[reps / 2] : 0;
            free(times);
            ppk_panel_to_rows(Pp, m, n, ng, P);
            ppk_panel64_scales(t, &R.f, n, k, s, o);
        }
        free(zt0);
    } else {
        const int x8 = !strcmp(j->layout, "ggml-x8"), q4k = !strcmp(j->type, "Q4_K");
        const int64_t units = (n / 8) * (x8 && q4k ? ksb : k / 32);
        if (n % 8) {
            snprintf(ERR, sizeof ERR, "N=%lld is not a multiple of 8", (long long)n);
        } else if (x8) {
            R.w = load(j->dir, "blocks", units * (q4k ? 1152 : 144), 0);
        } else {
            R.w = load(j->dir, "qs", units * (strcmp(j->layout, "il8-int8") ? 128 : 256), 0);
            R.f32a = load(j->dir, q4k ? "dsc" : "scales", units * 32, 0);
            if (q4k) R.f32b = load(j->dir, "dmn", units * 32, 0);
        }
        if (!ERR[0] && a && da) {
            int64_t reps = j->reps > 0 ? j->reps : 1;
            double *times = malloc(sizeof(double) * reps);
            for (int64_t r = 0; r < reps; r++) {
                double t0 = now();
                ir->fn(R.w, a, m, n, k, ir->offset, P);
                times[r] = now() - t0;
            }
            qsort(times, reps, sizeof(double), cmp_double);
            best = j->reps > 0 ? times[reps / 2] : 0;
            free(times);
            if (x8)
                (q4k ? ppk_x8_q4_k_scales : ppk_x8_q4_0_scales)(R.w, n, k, s, o);
            else
                ppk_il8_scales(R.f32a, R.f32b, n, k, s, o);
        }
    }
    if (best >= 0) {
        ppk_group_sums(a, m, k, G, A);
        ppk_rescale(t->scheme, P, A, s, o, da, m, n, ng, G, y);
        if (!save(j->out, "P", P, sizeof(int32_t) * m * n * ng) || !save(j->out, "y", y, sizeof(float) * m * n))
            best = -1;
    } else if (!ERR[0]) {
        snprintf(ERR, sizeof ERR, "out of memory");
    }
    free_regions(&R);
    free(a); free(da); free(s); free(o); free(P); free(A); free(y); free(Pp);
    return best;
}

int main(void) {
    detect();
    char line[8192];
    setvbuf(stdout, 0, _IOLBF, 0);
    while (fgets(line, sizeof line, stdin)) {
        char cmd[16], layout[32], kernel[32], type[16], dir[4096];
        long long n, k, m, reps = 0;
        if (sscanf(line, "%15s", cmd) != 1)
            continue;
        if (!strcmp(cmd, "quit"))
            break;
        if (!strcmp(cmd, "caps")) {
#if defined(__aarch64__)
            const char *arch = "aarch64";
#elif defined(__x86_64__)
            const char *arch = "x86_64";
#else
            const char *arch = "other";
#endif
            printf("caps arch=%s sme2=%d svl=%d dotprod=%d i8mm=%d avx2=%d\n", arch, CAPS.sme2, CAPS.svl, CAPS.dotprod,
                   CAPS.i8mm, CAPS.avx2);
            continue;
        }
        int bench = !strcmp(cmd, "bench");
        char out[4096] = "";
        int got = bench ? sscanf(line, "%15s %31s %31s %15s %lld %lld %lld %4095s %lld", cmd, layout, kernel, type, &n, &k,
                                 &m, dir, &reps)
                        : sscanf(line, "%15s %31s %31s %15s %lld %lld %lld %4095s %4095s", cmd, layout, kernel, type, &n, &k,
                                 &m, dir, out);
        if ((!bench && strcmp(cmd, "run")) || got < 8 || (bench && (got < 9 || reps < 1))) {
            printf("error bad command: %s", line);
            continue;
        }
        job_t j = {layout, kernel, type, dir, out[0] ? out : dir, n, k, m, bench ? reps : 0};
        double secs = run(&j);
        if (secs < 0)
            printf("error %s\n", ERR);
        else if (bench)
            printf("ok %.9f\n", secs);
        else
            printf("ok\n");
    }
    return 0;
}
