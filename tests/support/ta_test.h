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

/* max |a - b| over n floats (NaN anywhere -> +inf unless both NaN at that place). */
double ta_test_max_abs_diff(const float *a, const double *b, size_t n);

#endif
