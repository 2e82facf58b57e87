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

/* Allocation through the hook. ta_alloc returns 64-byte aligned memory (2 MiB aligned
 * and huge-page advised from 2 MiB up), or NULL with a TA_ENOMEM message recorded.
 * ta_alloc_zeroed also clears it. ta_free(NULL) is fine. */
void *ta_alloc(size_t bytes);
void *ta_alloc_zeroed(size_t bytes);
void ta_free(void *ptr);


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
 * thread claims its next chunk before it runs the current one, to prefetch for it):
 * call inside the region. A thread's first chunk is its own index in the team
 * (ta_claim_first), the next ones come from *counter (0 before the region) past the
 * team's size (ta_claim_next), so no thread claims a second chunk before every thread
 * holds a first: with a shared counter for both, the first thread to arrive took its
 * first and its next chunk before the others started, and with as many chunks as
 * threads ran all of them (backward, B1 H2 Lq16384 Lk64 on 2 threads: 7.9 ms against 8.3
 * on 1). Each chunk is taken once whatever the team's size. */
int64_t ta_claim_first(void);
int64_t ta_claim_next(int64_t *counter);
/* How many consecutive chunks one claim should take when `chunks` short, alike chunks
 * feed nt threads: 1, or from 256 chunks a thread up to 16, leaving at least 64 claims a
 * thread (a claim's atomic, contended between the cores and waiting on the previous
 * chunk's non-temporal stores, costs ~0.2 - 0.4 us; the callers say which chunks are
 * short enough). */
int64_t ta_claim_bundle(int64_t chunks, int nt);

/* Monotonic time in seconds. */
double ta_now(void);

#endif
