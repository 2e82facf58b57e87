#include "sdpa_varlen_oracle.h"

#include "sdpa_grad_oracle.h"

#include <stdlib.h>
#include <string.h>

/* Rows r0 .. r0 + L of a packed [T, Hx, X] array <-> a dense [Hx, L, X] one. */
static void gather(double *dense, const double *packed, int64_t r0, int64_t L, int64_t Hx,
                   int64_t X)
{
    for (int64_t h = 0; h < Hx; h++)
        for (int64_t l = 0; l < L; l++)
            memcpy(dense + (h * L + l) * X, packed + ((r0 + l) * Hx + h) * X,
                   sizeof(double) * (size_t)X);
}

static void scatter(double *packed, const double *dense, int64_t r0, int64_t L, int64_t Hx,
                    int64_t X)
{
    for (int64_t h = 0; h < Hx; h++)
        for (int64_t l = 0; l < L; l++)
            memcpy(packed + ((r0 + l) * Hx + h) * X, dense + (h * L + l) * X,
                   sizeof(double) * (size_t)X);
}

static double *dense_of(const double *packed, int64_t r0, int64_t L, int64_t Hx, int64_t X)
{
    double *d = malloc(sizeof(double) * (size_t)(Hx * L * X + 1));
    if (packed) gather(d, packed, r0, L, Hx, X);
    return d;
}

/* Sequence s as a dense problem (B = 1, no mask) of the grad oracle. */
static prob seq_prob(const ta_test_varlen *b, int64_t s)
{
    prob p;
    memset(&p, 0, sizeof p);
    p.c = (cfg){.name = "varlen", .B = 1, .H = b->H, .Hkv = b->Hkv,
                .Lq = b->cq[s + 1] - b->cq[s], .Lk = b->ck[s + 1] - b->ck[s], .D = b->D,
                .Dv = b->Dv, .scale = b->scale, .causal = b->causal, .mask = MASK_NONE};
    return p;
}

void ta_test_varlen_forward64(const ta_test_varlen *b, const double *q, const double *k,
                              const double *v, double *o, double *lse)
{
    const int64_t Tq = b->cq[b->n];
    for (int64_t s = 0; s < b->n; s++) {
        prob p = seq_prob(b, s);
        const int64_t Lq = p.c.Lq, Lk = p.c.Lk, q0 = b->cq[s], k0 = b->ck[s];
        double *qd = dense_of(q, q0, Lq, b->H, b->D), *kd = dense_of(k, k0, Lk, b->Hkv, b->D);
        double *vd = dense_of(v, k0, Lk, b->Hkv, b->Dv), *od = dense_of(NULL, 0, Lq, b->H, b->Dv);
        double *ld = dense_of(NULL, 0, Lq, b->H, 1);
        ta_test_grad_forward64(&p, qd, kd, vd, od, ld);
        scatter(o, od, q0, Lq, b->H, b->Dv);
        for (int64_t h = 0; h < b->H; h++)
            for (int64_t i = 0; i < Lq; i++) lse[h * Tq + q0 + i] = ld[h * Lq + i];
        free(qd); free(kd); free(vd); free(od); free(ld);
    }
}

void ta_test_varlen_backward64(const ta_test_varlen *b, const double *q, const double *k,
                               const double *v, const double *o, const double *dout,
                               double *dq, double *dk, double *dv)
{
    for (int64_t s = 0; s < b->n; s++) {
        prob p = seq_prob(b, s);
        const int64_t Lq = p.c.Lq, Lk = p.c.Lk, q0 = b->cq[s], k0 = b->ck[s];
        p.q = dense_of(q, q0, Lq, b->H, b->D);
        p.k = dense_of(k, k0, Lk, b->Hkv, b->D);
        p.v = dense_of(v, k0, Lk, b->Hkv, b->Dv);
        p.dout = dense_of(dout, q0, Lq, b->H, b->Dv);
        double *od = dense_of(o, q0, Lq, b->H, b->Dv);
        double *dqd = dense_of(NULL, 0, Lq, b->H, b->D), *dkd = dense_of(NULL, 0, Lk, b->Hkv, b->D);
        double *dvd = dense_of(NULL, 0, Lk, b->Hkv, b->Dv);
        ta_test_grad_backward64(&p, od, dqd, dkd, dvd);
        scatter(dq, dqd, q0, Lq, b->H, b->D);
        scatter(dk, dkd, k0, Lk, b->Hkv, b->D);
        scatter(dv, dvd, k0, Lk, b->Hkv, b->Dv);
        free(p.q); free(p.k); free(p.v); free(p.dout);
        free(od); free(dqd); free(dkd); free(dvd);
    }
}
