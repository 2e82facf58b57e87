/* Internal core helpers shared by every layer of the library. */
#ifndef TA_CORE_H
#define TA_CORE_H

#include "tensorattn.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Records a formatted message for ta_last_error() and returns code. */
ta_status ta_error(ta_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Clears the message (successful public calls need not call it). */
void ta_error_clear(void);

/* Internal invariants only: never on user input. Compiled in debug builds; in release
 * an impossible state returns TA_EINTERNAL where the caller checks. */
#ifdef NDEBUG
#define TA_ASSERT(cond) ((void)0)
#else
#include <assert.h>
#define TA_ASSERT(cond) assert(cond)
#endif

/* x rounded up to a multiple of m (m > 0, x >= 0). */
static inline int64_t ta_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

#define TA_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TA_MAX(a, b) ((a) > (b) ? (a) : (b))

/* The library is built with hidden visibility (only include/tensorattn.h is exported from
 * libtensorattn.so); the internal functions that libtensorattn_mpi (src/dist, a separate
 * static library, installed) calls are exported too, so that it links against the shared
 * library as well as the static one. */
#if defined(__GNUC__)
#define TA_DIST_EXPORT __attribute__((visibility("default")))
#else
#define TA_DIST_EXPORT
#endif

/* Allocation through the hook. ta_alloc returns 64-byte aligned memory (2 MiB aligned
 * and huge-page advised from 2 MiB up), or NULL with a TA_ENOMEM message recorded.
 * ta_alloc_zeroed also clears it. ta_free(NULL) is fine. */
TA_DIST_EXPORT void *ta_alloc(size_t bytes);
TA_DIST_EXPORT void *ta_alloc_zeroed(size_t bytes);
TA_DIST_EXPORT void ta_free(void *ptr);


/* a * b into *out; false on size_t overflow (or negative). */
bool ta_mul_size(size_t *out, size_t a, size_t b);
/* a + b for scratch sizes: SIZE_MAX ("does not fit") when either is, or the sum wraps. */
static inline size_t ta_size_sum(size_t a, size_t b)
{
    return a == SIZE_MAX || b == SIZE_MAX || a > SIZE_MAX - b ? SIZE_MAX : a + b;
}
/* Product of shape[0..ndim-1] into *out; false on overflow or a negative extent. */
bool ta_shape_numel(int64_t *out, int ndim, const int64_t *shape);
/* "[2, 3, 4]" into buf (always terminated). Returns buf. */
char *ta_shape_str(char *buf, size_t size, int ndim, const int64_t *shape);
#define TA_SHAPE_STR_MAX 160

/* Threads to use for the next parallel region. */
int ta_threads(void);

/* Chunks of work (0, 1, ...) that the threads of a parallel region take one ahead (a
 * thread claims its next chunk before it runs the current one, to prefetch for it), in
 * claims of `per` consecutive chunks: call inside the region. A thread's first claim is
 * its own index in the team, the next ones come from *counter (0 before the region) past
 * the team's size, so no thread claims a second before every thread holds a first: with
 * a shared counter for both, the first thread to arrive took its first and its next
 * chunk before the others started, and with as many chunks as threads ran all of them
 * (backward, B1 H2 Lq16384 Lk64 on 2 threads: 7.9 ms against 8.3 on 1). Each chunk is
 * taken once whatever the team's size. A walk:
 *     ta_claims cl;
 *     for (int64_t c = ta_claims_first(&cl, &counter, per, n); c < n;) {
 *         const int64_t next = ta_claims_next(&cl, c); // the thread's next chunk, or >= n
 *         ... run chunk c (knowing next) ...
 *         c = next;
 *     }
 * On one thread the claims take no atomic (its lock would wait for the previous chunk's
 * non-temporal stores to drain: a varlen call of 1000 sequences of 3 tokens, 1 thread,
 * spent 6.6% of its samples there). */
typedef struct ta_claims {
    int64_t *counter; /* the team's, 0 before the region */
    int64_t per, n;   /* chunks a claim, chunks in all */
    int64_t end;      /* the end of the claim that holds the chunk last returned */
} ta_claims;
int64_t ta_claims_first(ta_claims *cl, int64_t *counter, int64_t per, int64_t n);
int64_t ta_claims_next(ta_claims *cl, int64_t c);
/* How many consecutive chunks one claim should take when `chunks` short, alike chunks
 * feed nt threads: 1, or from 256 chunks a thread up to 16, leaving at least 64 claims a
 * thread (a claim's atomic, contended between the cores and waiting on the previous
 * chunk's non-temporal stores, costs ~0.2 - 0.4 us; the callers say which chunks are
 * short enough). */
int64_t ta_claim_bundle(int64_t chunks, int nt);

/* Monotonic time in seconds. */
double ta_now(void);

#endif
