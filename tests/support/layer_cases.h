/* A case of the layer fixtures (layers.tafx, layers_grad.tafx; tools/fixtures_layers.py,
 * tools/fixtures_layers_grad.py): the seed's SelfAttention ("seed") or
 * nn.MultiheadAttention ("torch") with its inputs and the options its metadata asks for. */
#ifndef TA_TEST_LAYER_CASES_H
#define TA_TEST_LAYER_CASES_H

#include <stdint.h>

#include "fixtures.h"

typedef struct ta_test_layer_case {
    const char *name, *meta;
    ta_layout layout;
    int64_t E, H;            /* embed size, heads */
    int self;                /* self attention: queries passed as keys and values too */
    ta_tensor q, k, v;       /* the records "queries", "keys", "values" */
    ta_tensor mask, kpm;     /* "mask", "key_padding_mask" (zeroed when absent) */
    ta_attention_opts opts;  /* mask, key padding mask and causal; no weights */
} ta_test_layer_case;

/* Loads case `name` of f; fails the test on a missing record or an unknown mask mode. */
void ta_test_layer_case_load(ta_test_layer_case *lc, const ta_fixture_file *f, const char *name);
void ta_test_layer_case_free(ta_test_layer_case *lc);

/* Runs fn on every case of `kind` ("seed" or "torch") in the fixture file `file`, in file
 * order; fails the test when there are fewer than min_cases (a fixture must not
 * silently lose its cases). Returns the number run. */
int ta_test_layer_cases_run(const char *file, const char *kind, int min_cases,
                            void (*fn)(const ta_fixture_file *f, const char *name, void *ctx),
                            void *ctx);

#endif
