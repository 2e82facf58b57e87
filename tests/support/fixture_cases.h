/* Test-side helpers over fixture cases (fixtures.h) that fail the running cmocka test
 * instead of returning a status: a record that must exist, a record's values copied
 * out, and the comparison of a result with a record. */
#ifndef TA_TEST_FIXTURE_CASES_H
#define TA_TEST_FIXTURE_CASES_H

#include <stdint.h>

#include "fixtures.h"

/* The record "<c>/<role>"; fails the test when the case has none. */
const ta_fixture_record *ta_fixture_need(const ta_fixture_file *f, const char *c,
                                         const char *role);
/* The record "<c>/<role>" as malloc'd doubles (free()), or NULL when the case has none. */
double *ta_fixture_case_f64(const ta_fixture_file *f, const char *c, const char *role);
/* The int64 record "<c>/<role>" as malloc'd values (free()), or NULL when the case has
 * none; fails the test for another dtype. */
int64_t *ta_fixture_case_i64(const ta_fixture_file *f, const char *c, const char *role);

/* Runs fn(f, case name, ctx) on every case of the fixture file `file` whose metadata has
 * key=value (key NULL: every case), in file order. Returns the number of cases run. */
int ta_fixture_cases_run(const char *file, const char *key, const char *value,
                         void (*fn)(const ta_fixture_file *f, const char *name, void *ctx),
                         void *ctx);

/* The error of a float32 tensor (any strides) against a record of the same shape, as
 * ta_test_max_err with rel (0: absolute; NaN must meet NaN, an infinity the same
 * infinity); fails the test, naming case c, `what` and the first bad element, when the
 * shapes differ or the error exceeds tol. Returns the error. */
double ta_fixture_expect_close(const char *c, const char *what, const ta_tensor *got,
                               const ta_fixture_record *want, double rel, double tol);

#endif
