/* Shared helpers for the unit tests (cmocka). */
#ifndef TA_TEST_H
#define TA_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tensorattn.h"

/* Asserts a call succeeded, printing ta_last_error() if not. */
#define TA_CHECK_OK(call)                                                                  \
    do {                                                                                   \
        ta_status ta_check_st_ = (call);                                                   \
        if (ta_check_st_ != TA_OK)                                                         \
            fail_msg("%s -> %s: %s", #call, ta_status_name(ta_check_st_), ta_last_error()); \
    } while (0)

/* Asserts a call failed with `code` and its message contains `needle`. */
#define TA_CHECK_ERR(call, code, needle)                                                   \
    do {                                                                                   \
        ta_status ta_check_st_ = (call);                                                   \
        if (ta_check_st_ != (code))                                                        \
            fail_msg("%s -> %s, expected %s (message: %s)", #call,                          \
                     ta_status_name(ta_check_st_), ta_status_name(code), ta_last_error()); \
        if (!strstr(ta_last_error(), (needle)))                                            \
            fail_msg("%s: message '%s' lacks '%s'", #call, ta_last_error(), (needle));     \
    } while (0)

#include <string.h>

/* A private temporary directory for one test program (cmocka group setup/teardown). */
extern char ta_test_dir[64];
/* mkdtemp("/tmp/<tag>_XXXXXX") into ta_test_dir; 0 on success. */
int ta_test_make_dir(const char *tag);
/* rm -rf ta_test_dir; 0 on success. */
int ta_test_remove_dir(void);
/* cmocka group teardown: ta_test_remove_dir. */
int ta_test_teardown_dir(void **state);
/* "<ta_test_dir>/<name>" from a ring of 32 buffers (enough for one command line). */
char *ta_test_path(const char *name);

/* The running worst error after one more error e: e when it is larger, +inf when it is
 * NaN (a NaN output, an inf - inf), which then stays (NaN is worse than anything). Where
 * fmax(worst, e) and `if (e > worst) worst = e` drop a NaN, and a later `worst > tol`
 * cannot fail on one, this folds it in. */
double ta_test_worse(double worst, double e);

/* Advances idx over shape in C order (the last index fastest; wraps to all zeros). */
void ta_test_next_index(int ndim, const int64_t *shape, int64_t *idx);
/* Max over the elements of t (any strides, visited in C order) against C-order doubles
 * ref of |t - ref| / max(1, rel * |ref|) (rel 0: the absolute error); NaN must meet NaN
 * and an infinity the same infinity, else +inf. When first_bad is not NULL it receives
 * the C-order index of the first element whose error exceeds tol (-1: none). */
double ta_test_max_err(const ta_tensor *t, const double *ref, double rel, double tol,
                       int64_t *first_bad);
/* The elements of t (any strides) in C order as doubles (malloc'd: free()). */
double *ta_test_to_f64(const ta_tensor *t);
/* Writes the C-order doubles x into t (any strides), rounded to float. */
void ta_test_from_f64(ta_tensor *t, const double *x);
/* A new contiguous tensor *dst of dtype dt holding src's values (rounded as ta_convert
 * rounds: a half-precision input as the library will see it). */
void ta_test_as_dtype(ta_tensor *dst, const ta_tensor *src, ta_dtype dt);

/* How ta_test_tensor4 lays out a [B, H, L, X] tensor in memory. */
typedef enum ta_test_layout {
    TA_TEST_BHLD,  /* contiguous */
    TA_TEST_BLHD,  /* [B, L, H, X] in memory (the second seed's head split) */
    TA_TEST_DLAST, /* [B, H, X, L] in memory: the last dim strided */
    TA_TEST_GUARD  /* contiguous, each tensor ending exactly at a PROT_NONE page: only
                      sdpa_grad_oracle's problems take it (they own the mappings) */
} ta_test_layout;
/* A new [s0, s1, s2, s3] float32 tensor stored as layout says (not TA_TEST_GUARD) in
 * *store (owning); *view is the [s0, s1, s2, s3] view of it; values copied from src when
 * not NULL. */
void ta_test_tensor4(ta_tensor *view, ta_tensor *store, const int64_t s[4],
                     ta_test_layout layout, const ta_tensor *src);

#endif
