/* A naive float64 einsum (torch 1.13 rules), the comparison of a result with it, random
 * operand layouts and a small xorshift generator, for the einsum tests (einsum_oracle.h). */
#include "einsum_oracle.h"
#include "ta_test.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- random */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

uint64_t ta_test_rng_next(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

int ta_test_rng_int(int n) { return (int)(ta_test_rng_next() % (uint64_t)n); }
float ta_test_rng_float(void)
{
    return (float)((double)(ta_test_rng_next() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* ---------------------------------------------------------------- oracle */

#define OR_MAX_SYM 64 /* 52 letters, then up to 8 dims under "..." */

typedef struct oracle_term {
    int n;       /* symbols, with the ellipsis expanded */
    int sym[16];
} oracle_term;

int ta_test_einsum_symbol(char c) { return c >= 'a' ? 26 + (c - 'a') : c - 'A'; }

/* Splits one term (no spaces) into letters and the ellipsis position. */
static void oracle_split(const char *s, int len, int *letters, int *nl, int *ell)
{
    *nl = 0;
    *ell = -1;
    for (int i = 0; i < len; i++) {
        if (s[i] == '.') {
            *ell = *nl;
            i += 2;
        } else {
            letters[(*nl)++] = ta_test_einsum_symbol(s[i]);
        }
    }
}

void ta_test_einsum_oracle(oracle_result *r, const char *spec_in, int nops, const ta_tensor *const *ops)
{
    char spec[256];
    int len = 0;
    for (const char *p = spec_in; *p; p++)
        if (*p != ' ') spec[len++] = *p;
    spec[len] = 0;
    const char *arrow = strstr(spec, "->");
    int in_len = arrow ? (int)(arrow - spec) : len;
    int letters[3][16], nl[3], ell[3], ne[2], E = 0;
    const char *t0 = spec;
    for (int k = 0; k < nops; k++) {
        const char *comma = memchr(t0, ',', (size_t)(spec + in_len - t0));
        int tl = comma && k == 0 && nops == 2 ? (int)(comma - t0) : (int)(spec + in_len - t0);
        oracle_split(t0, tl, letters[k], &nl[k], &ell[k]);
        ne[k] = ell[k] >= 0 ? ops[k]->ndim - nl[k] : 0;
        if (ne[k] > E) E = ne[k];
        t0 += tl + 1;
    }
    oracle_term term[2];
    int64_t size[OR_MAX_SYM];
    int count[OR_MAX_SYM] = {0};
    for (int s = 0; s < OR_MAX_SYM; s++) size[s] = -1;
    for (int k = 0; k < nops; k++) {
        term[k].n = ops[k]->ndim;
        for (int d = 0; d < ops[k]->ndim; d++) {
            int s;
            if (ell[k] >= 0 && d >= ell[k] && d < ell[k] + ne[k]) s = 52 + E - ne[k] + (d - ell[k]);
            else s = letters[k][ell[k] >= 0 && d >= ell[k] ? d - ne[k] : d];
            term[k].sym[d] = s;
            count[s]++;
            int64_t n = ops[k]->shape[d];
            if (size[s] < 0 || size[s] == 1) size[s] = n;
        }
    }
    int osym[TA_MAX_DIMS + 52], on = 0;
    if (arrow) {
        int ol[16], onl, oell;
        oracle_split(arrow + 2, (int)strlen(arrow + 2), ol, &onl, &oell);
        for (int i = 0; i <= onl; i++) {
            if (i == oell)
                for (int e = 0; e < E; e++) osym[on++] = 52 + e;
            if (i < onl) osym[on++] = ol[i];
        }
    } else {
        for (int e = 0; e < E; e++) osym[on++] = 52 + e;
        for (int s = 0; s < 52; s++)
            if (count[s] == 1) osym[on++] = s;
    }
    r->ndim = on;
    r->numel = 1;
    bool in_out[OR_MAX_SYM] = {false};
    for (int d = 0; d < on; d++) {
        r->shape[d] = size[osym[d]];
        r->numel *= r->shape[d];
        in_out[osym[d]] = true;
    }
    r->terms = 1;
    int syms[OR_MAX_SYM], ns = 0;
    for (int s = 0; s < OR_MAX_SYM; s++)
        if (size[s] >= 0) {
            syms[ns++] = s;
            if (!in_out[s]) r->terms *= size[s];
        }
    r->val = calloc((size_t)(r->numel ? r->numel : 1), sizeof(double));
    r->mag = calloc((size_t)(r->numel ? r->numel : 1), sizeof(double));
    for (int s = 0; s < ns; s++)
        if (size[syms[s]] == 0) return;
    int64_t v[OR_MAX_SYM] = {0};
    for (;;) {
        double prod = 1.0;
        for (int k = 0; k < nops; k++) {
            const float *p = ops[k]->data;
            for (int d = 0; d < ops[k]->ndim; d++)
                if (ops[k]->shape[d] != 1) p += v[term[k].sym[d]] * ops[k]->stride[d];
            prod *= (double)*p;
        }
        int64_t o = 0;
        for (int d = 0; d < on; d++) o = o * r->shape[d] + v[osym[d]];
        r->val[o] += prod;
        r->mag[o] += fabs(prod);
        int s = ns - 1;
        for (; s >= 0; s--) {
            if (++v[syms[s]] < size[syms[s]]) break;
            v[syms[s]] = 0;
        }
        if (s < 0) break;
    }
}

void ta_test_einsum_oracle_free(oracle_result *r)
{
    free(r->val);
    free(r->mag);
}

void ta_test_einsum_check(const ta_tensor *got, const oracle_result *r, const char *what)
{
    assert_int_equal(got->ndim, r->ndim);
    for (int d = 0; d < r->ndim; d++)
        if (got->shape[d] != r->shape[d])
            fail_msg("%s: dim %d is %lld, oracle %lld", what, d, (long long)got->shape[d],
                     (long long)r->shape[d]);
    double tol = 1e-6 * sqrt((double)(r->terms > 1 ? r->terms : 1));
    int64_t idx[TA_MAX_DIMS] = {0};
    for (int64_t o = 0; o < r->numel; o++) {
        int64_t rem = o;
        for (int d = r->ndim - 1; d >= 0; d--) {
            idx[d] = rem % r->shape[d];
            rem /= r->shape[d];
        }
        double g = *ta_tensor_at_const(got, idx);
        double err = fabs(g - r->val[o]);
        if (!(err <= tol * r->mag[o] + 1e-30))
            fail_msg("%s: element %lld is %.9g, oracle %.9g (sum|terms| %.3g, K %lld)", what,
                     (long long)o, g, r->val[o], r->mag[o], (long long)r->terms);
    }
}

/* ---------------------------------------------------------------- layouts */

void rtensor_make(rtensor *r, int nd, const int64_t *shape, int layout)
{
    int perm[TA_MAX_DIMS], step[TA_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        perm[d] = d;
        step[d] = 1;
    }
    if (layout != L_CONTIG)
        for (int d = nd - 1; d > 0; d--) {
            int j = ta_test_rng_int(d + 1), x = perm[d];
            perm[d] = perm[j];
            perm[j] = x;
        }
    if (layout == L_STEPPED)
        for (int d = 0; d < nd; d++) step[d] = 1 + ta_test_rng_int(2);
    int64_t stride[TA_MAX_DIMS], s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        int d = perm[i];
        stride[d] = s * step[d];
        s = stride[d] * (shape[d] > 0 ? shape[d] : 1);
    }
    r->span = s;
    r->buf = malloc((size_t)s * sizeof(float) + sizeof(float));
    for (int64_t i = 0; i < s; i++) r->buf[i] = ta_test_rng_float();
    float *base = r->buf;
    if (layout == L_NEGATIVE && nd > 0) {
        int d = ta_test_rng_int(nd);
        if (shape[d] > 0) base += (shape[d] - 1) * stride[d];
        stride[d] = -stride[d];
    }
    if (layout == L_EXPANDED && nd > 0) stride[ta_test_rng_int(nd)] = 0;
    TA_CHECK_OK(ta_tensor_from_buffer(&r->t, base, nd, shape, stride));
}

void rtensor_free(rtensor *r)
{
    free(r->buf);
    r->buf = NULL;
}

void ta_test_einsum_check_alloc(const char *spec, const ta_tensor *a, const ta_tensor *b,
                                const char *what)
{
    const ta_tensor *ops[2] = {a, b};
    oracle_result ref;
    ta_test_einsum_oracle(&ref, spec, b ? 2 : 1, ops);
    ta_tensor out = {0};
    TA_CHECK_OK(b ? ta_einsum_alloc(&out, spec, a, b) : ta_einsum1_alloc(&out, spec, a));
    ta_test_einsum_check(&out, &ref, what ? what : spec);
    ta_tensor_free(&out);
    ta_test_einsum_oracle_free(&ref);
}
