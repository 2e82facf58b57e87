/* Whole-or-nothing file writes and tensor serialisation shared by the .npy and
 * .safetensors writers. */
#include "io/io_internal.h"

#include "core/tensor_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef NAME_MAX
#define TA_NAME_MAX NAME_MAX
#else
#define TA_NAME_MAX 255
#endif

/* The process umask without changing it: umask(2) can only be read by setting it,
 * which races with other threads, so read it from /proc (Linux >= 4.7). */
static mode_t current_umask(void)
{
    FILE *fp = fopen("/proc/self/status", "r");
    mode_t mask = 022;
    if (!fp) return mask;
    char line[256];
    while (fgets(line, sizeof line, fp)) {
        unsigned int m;
        if (sscanf(line, "Umask: %o", &m) == 1) {
            mask = (mode_t)m;
            break;
        }
    }
    fclose(fp);
    return mask;
}

ta_status ta_atomic_open(ta_atomic_file *f, const char *fn, const char *path)
{
    memset(f, 0, sizeof *f);
    f->fn = fn;
    f->path = path;
    /* the rename would replace whatever is there: a device (as root, /dev/null itself), a
     * pipe or a directory is refused rather than replaced */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return ta_error(TA_EIO, "%s: %s exists and is not a regular file (a directory, device "
                        "or pipe); files are written whole to a temporary and renamed over "
                        "the path, which would replace it", fn, path);
    size_t len = strlen(path);
    static const char suffix[] = ".tmp.XXXXXX";
    /* "<path>.tmp.XXXXXX", or "<dir>/.tmp.XXXXXX" where the name is too long for the
     * suffix (a name of up to NAME_MAX bytes is a valid output) */
    const char *slash = strrchr(path, '/');
    const size_t dir = slash ? (size_t)(slash + 1 - path) : 0;
    const size_t keep = len - dir + sizeof suffix - 1 > TA_NAME_MAX ? dir : len;
    f->tmp_path = ta_alloc(keep + sizeof suffix);
    if (!f->tmp_path) return TA_ENOMEM;
    memcpy(f->tmp_path, path, keep);
    memcpy(f->tmp_path + keep, suffix, sizeof suffix);
    int fd = mkstemp(f->tmp_path);
    if (fd < 0) {
        int e = errno;
        ta_free(f->tmp_path);
        f->tmp_path = NULL;
        return ta_error(TA_EIO, "%s: %s: cannot create a temporary file beside it: %s", fn,
                        path, strerror(e));
    }
    /* mkstemp makes the file 0600; give it the mode open(path, O_CREAT, 0666) would. */
    if (fchmod(fd, 0666 & ~current_umask()) != 0 || !(f->fp = fdopen(fd, "wb"))) {
        int e = errno;
        close(fd);
        unlink(f->tmp_path);
        ta_free(f->tmp_path);
        f->tmp_path = NULL;
        return ta_error(TA_EIO, "%s: %s: cannot prepare the temporary file: %s", fn, path,
                        strerror(e));
    }
    return TA_OK;
}

void ta_atomic_abort(ta_atomic_file *f)
{
    if (f->fp) fclose(f->fp);
    f->fp = NULL;
    if (f->tmp_path) {
        unlink(f->tmp_path);
        ta_free(f->tmp_path);
        f->tmp_path = NULL;
    }
}

ta_status ta_atomic_write(ta_atomic_file *f, const void *buf, size_t n)
{
    if (n == 0) return TA_OK;
    if (fwrite(buf, 1, n, f->fp) == n) return TA_OK;
    int e = errno;
    ta_atomic_abort(f);
    return ta_error(TA_EIO, "%s: %s: write failed: %s", f->fn, f->path, strerror(e));
}

ta_status ta_atomic_commit(ta_atomic_file *f)
{
    const char *what = "flush";
    if (fflush(f->fp) != 0) goto fail;
    what = "fsync";
    if (fsync(fileno(f->fp)) != 0) goto fail;
    what = "close";
    FILE *fp = f->fp;
    f->fp = NULL;
    if (fclose(fp) != 0) goto fail;
    what = "rename";
    if (rename(f->tmp_path, f->path) != 0) goto fail;
    ta_free(f->tmp_path);
    f->tmp_path = NULL;
    return TA_OK;
fail:;
    int e = errno;
    ta_atomic_abort(f);
    return ta_error(TA_EIO, "%s: %s: %s failed: %s", f->fn, f->path, what, strerror(e));
}

/* t: any shape, strides and dtype, written as dtype `as`. Rows of the last dimension
 * are gathered (and converted) into a bounded buffer, so a strided or broadcast view is
 * written without a full copy. */
ta_status ta_atomic_write_tensor(ta_atomic_file *f, const ta_tensor *t, ta_dtype as)
{
    int64_t numel = ta_tensor_numel(t);
    if (numel == 0) return TA_OK;
    size_t out = ta_dtype_size(as);
    if (as == t->dtype && ta_tensor_is_contiguous(t))
        return ta_atomic_write(f, t->data, (size_t)numel * out);
    unsigned char buf[16384]; /* small enough for any thread's stack */
    const int64_t cap = (int64_t)(sizeof buf / out);
    /* Iterate over all dims but the last; the last one is walked with its stride. */
    int nd = t->ndim, outer = nd ? nd - 1 : 0;
    int64_t idx[TA_MAX_DIMS] = {0};
    int64_t len = nd ? t->shape[nd - 1] : 1, step = nd ? t->stride[nd - 1] : 1;
    int64_t rows = numel / len, used = 0;
    size_t in = ta_dtype_size(t->dtype);
    for (int64_t r = 0; r < rows; r++) {
        const unsigned char *row = ta_tensor_ptr(t, idx);
        for (int64_t j = 0; j < len;) {
            int64_t k = TA_MIN(len - j, cap - used);
            ta_convert_strided(buf + used * (int64_t)out, as, 1, row + j * step * (int64_t)in,
                               t->dtype, step, k);
            used += k;
            j += k;
            if (used == cap) {
                ta_status st = ta_atomic_write(f, buf, (size_t)used * out);
                if (st) return st;
                used = 0;
            }
        }
        ta_index_next(outer, t->shape, idx);
    }
    return ta_atomic_write(f, buf, (size_t)used * out);
}
