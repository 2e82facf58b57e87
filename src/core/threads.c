/* Thread count and time. OpenMP does the threading; the split never changes the
 * arithmetic, so the count only affects speed. */
#include "core/core.h"

#include <omp.h>
#include <time.h>

static int ta_num_threads = 0; /* 0: not chosen yet -> all cores */

ta_status ta_set_num_threads(int n)
{
    if (n < 1 || n > 4096)
        return ta_error(TA_EINVAL, "ta_set_num_threads: n must be in [1, 4096], got %d", n);
    ta_num_threads = n;
    return TA_OK;
}

int ta_get_num_threads(void)
{
    if (ta_num_threads == 0) {
        int n = omp_get_max_threads();
        return n < 1 ? 1 : n;
    }
    return ta_num_threads;
}

int ta_threads(void) { return ta_get_num_threads(); }

int64_t ta_claims_first(ta_claims *cl, int64_t *counter, int64_t per, int64_t n)
{
    *cl = (ta_claims){.counter = counter, .per = per < 1 ? 1 : per, .n = n};
    const int64_t c = omp_get_thread_num() * cl->per;
    cl->end = TA_MIN(n, c + cl->per);
    return c;
}

int64_t ta_claims_next(ta_claims *cl, int64_t c)
{
    if (c + 1 < cl->end) return c + 1;
    const int nt = omp_get_num_threads();
    const int64_t k = nt == 1 ? 1 + (*cl->counter)++
                              : nt + __atomic_fetch_add(cl->counter, 1, __ATOMIC_RELAXED);
    const int64_t next = k * cl->per;
    cl->end = TA_MIN(cl->n, next + cl->per);
    return next;
}

int64_t ta_claim_bundle(int64_t chunks, int nt)
{
    const int64_t n = nt < 1 ? 1 : nt;
    return chunks >= 256 * n ? TA_MAX(1, TA_MIN(16, chunks / (64 * n))) : 1;
}

double ta_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
