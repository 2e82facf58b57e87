/* Reader for the .tafx fixture files written by tools/gen_fixtures.py.
 *
 * The format (version 1) is described in tests/fixtures/README.md. A file is a list
 * of named, typed, shaped records; records named "<case>/<role>" form a case, whose
 * own metadata sits on the zero-length record "<case>/meta". Metadata is text,
 * "key=value" lines.
 *
 *     ta_fixture_file *f;
 *     if (ta_fixture_open(&f, "einsum.tafx") != TA_OK) fail_msg("%s", ta_last_error());
 *     for (int i = 0; i < ta_fixture_case_count(f); i++) {
 *         const char *c = ta_fixture_case_name(f, i);
 *         char spec[256];
 *         ta_fixture_meta_get(ta_fixture_case_meta(f, c), "spec", spec, sizeof spec);
 *         ta_tensor a;
 *         ta_fixture_tensor(&a, ta_fixture_case_record(f, c, "a"));  // float32 copy
 *         ...
 *     }
 *     ta_fixture_close(f);
 *
 * Every function validates its input and reports failures as ta_status with a
 * ta_last_error() message; a truncated or corrupted file is an error (TA_EFORMAT),
 * never a crash. */
#ifndef TA_TEST_FIXTURES_H
#define TA_TEST_FIXTURES_H

#include <stddef.h>
#include <stdint.h>

#include "tensorattn.h"

#define TA_FIXTURE_VERSION 1u

typedef enum ta_fixture_dtype {
    TA_FIXTURE_F32 = 1,
    TA_FIXTURE_F64 = 2,
    TA_FIXTURE_I64 = 3,
    TA_FIXTURE_U8 = 4, /* also booleans (0 / 1) */
    TA_FIXTURE_I32 = 5
} ta_fixture_dtype;

typedef struct ta_fixture_record {
    const char *name;        /* NUL-terminated */
    const char *meta;        /* NUL-terminated "key=value\n..." ("" if none) */
    ta_fixture_dtype dtype;
    int ndim;                /* 0 .. TA_MAX_DIMS */
    int64_t shape[TA_MAX_DIMS];
    int64_t numel;
    const void *data;        /* numel elements of dtype, C order, native, 64-byte aligned */
} ta_fixture_record;

typedef struct ta_fixture_file ta_fixture_file;

/* Opens TA_FIXTURE_DIR/name (or name itself when it contains a '/'), reads and
 * validates it whole. *out is set only on success; release with ta_fixture_close. */
ta_status ta_fixture_open(ta_fixture_file **out, const char *name);
/* Parses an in-memory image of a file (copied; bytes may be freed afterwards). */
ta_status ta_fixture_parse(ta_fixture_file **out, const void *bytes, size_t size);
void ta_fixture_close(ta_fixture_file *f);

/* Reads a whole file into a malloc'd buffer (for tests that corrupt it). */
ta_status ta_fixture_read_bytes(unsigned char **bytes, size_t *size, const char *name);
/* CRC-32 (IEEE 802.3, zlib's crc32) of bytes: the format's trailer. */
uint32_t ta_fixture_crc32(const void *bytes, size_t size);

uint32_t ta_fixture_version(const ta_fixture_file *f);
int ta_fixture_record_count(const ta_fixture_file *f);
const ta_fixture_record *ta_fixture_record_at(const ta_fixture_file *f, int i);
/* The record called name, or NULL. */
const ta_fixture_record *ta_fixture_find(const ta_fixture_file *f, const char *name);

/* Cases, in file order: the records named "<case>/meta" (other than "_set/meta"). */
int ta_fixture_case_count(const ta_fixture_file *f);
const char *ta_fixture_case_name(const ta_fixture_file *f, int i);
/* The case's metadata text ("" when the case has no meta record). */
const char *ta_fixture_case_meta(const ta_fixture_file *f, const char *case_name);
/* The record "<case_name>/<role>", or NULL. */
const ta_fixture_record *ta_fixture_case_record(const ta_fixture_file *f,
                                                const char *case_name, const char *role);

/* Looks up key in metadata text; copies its value (truncated to size - 1) into buf.
 * Returns 1 if found, 0 if not (buf then holds ""). */
int ta_fixture_meta_get(const char *meta, const char *key, char *buf, size_t size);
/* Parses a comma-separated integer list value ("2,0,1") into vals (at most cap).
 * Returns the count, or -1 if the key is absent or the value malformed. */
int ta_fixture_meta_ints(const char *meta, const char *key, int64_t *vals, int cap);

/* *t becomes a new owning contiguous float32 tensor with the record's values
 * (f64, i64, i32 and u8 records are converted). Release with ta_tensor_free. */
ta_status ta_fixture_tensor(ta_tensor *t, const ta_fixture_record *r);
/* Copies the record's values as doubles into dst (capacity cap elements). */
ta_status ta_fixture_to_f64(double *dst, size_t cap, const ta_fixture_record *r);

#endif
