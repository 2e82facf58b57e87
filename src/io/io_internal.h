/* Shared helpers of the file formats layer: atomic writes and exact reads (the dtype
 * conversions are core/dtype.h's). */
#ifndef TA_IO_INTERNAL_H
#define TA_IO_INTERNAL_H

#include "core/core.h"
#include "core/dtype.h"

#include <stdio.h>

/* .npy and .safetensors store little-endian values and this layer reads them with
 * plain memcpy; refuse to build where that would silently misread. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tensorattn's file readers assume a little-endian host"
#endif

/* A file written whole or not at all: the data goes to "<path>.tmp.XXXXXX" (mkstemp,
 * same directory, so rename is atomic; "<dir>/.tmp.XXXXXX" for a name too long to take
 * the suffix), and commit flushes, fsyncs and renames it over
 * path. Any failure removes the temporary file. fn names the public function for
 * messages. */
typedef struct ta_atomic_file {
    FILE *fp;
    char *tmp_path;
    const char *path;
    const char *fn;
} ta_atomic_file;

ta_status ta_atomic_open(ta_atomic_file *f, const char *fn, const char *path);
/* Writes n bytes; on failure records the message, aborts (removes the temporary file)
 * and returns TA_EIO. */
ta_status ta_atomic_write(ta_atomic_file *f, const void *buf, size_t n);
/* Flush, fsync, close, rename. On failure the temporary file is removed. */
ta_status ta_atomic_commit(ta_atomic_file *f);
/* Closes and removes the temporary file (after an error of the caller's own). Safe
 * to call on a file already aborted or committed. */
void ta_atomic_abort(ta_atomic_file *f);

/* Writes t's elements (any strides and dtype) in row-major order as little-endian
 * values of dtype `as` (converted as ta_convert when it differs), through a bounded
 * buffer. */
ta_status ta_atomic_write_tensor(ta_atomic_file *f, const ta_tensor *t, ta_dtype as);

/* Bytes in a bounded conversion buffer (a multiple of every item size). */
#define TA_IO_CHUNK ((size_t)1 << 16)

#endif
