/* libFuzzer target: the .npy reader. The input is the file: ta_npy_load and
 * ta_npy_load_int64 must return a status (never crash, leak or over-read); a loaded
 * tensor is saved and read back, and must round-trip bit for bit. */
#include "fuzz_common.h"
#include "tensorattn.h"

#include <stdlib.h>
#include <string.h>

static char npy_dir[64];

static void npy_remove_dir(void) { rmdir(npy_dir); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0) return 0;
    ta_tensor t = {0};
    if (ta_npy_load(&t, path) == TA_OK) {
        if (!npy_dir[0]) {
            snprintf(npy_dir, sizeof npy_dir, "/tmp/ta_fuzz_npy_XXXXXX");
            if (!mkdtemp(npy_dir)) abort();
            atexit(npy_remove_dir);
        }
        char out[96];
        snprintf(out, sizeof out, "%s/roundtrip.npy", npy_dir);
        if (ta_npy_save(out, &t) != TA_OK) abort();
        ta_tensor back = {0};
        if (ta_npy_load(&back, out) != TA_OK || back.ndim != t.ndim) abort();
        int64_t n = ta_tensor_numel(&t);
        if (memcmp(back.shape, t.shape, sizeof t.shape) != 0 ||
            (n && memcmp(back.data, t.data, (size_t)n * sizeof(float)) != 0))
            abort();
        ta_tensor_free(&back);
        unlink(out);
    }
    ta_tensor_free(&t);
    int64_t *v = NULL;
    int nd = -1;
    int64_t shape[TA_MAX_DIMS];
    if (ta_npy_load_int64(&v, &nd, shape, path) == TA_OK && (!v || nd < 0 || nd > TA_MAX_DIMS))
        abort();
    ta_npy_free(v);
    close(fd);
    return 0;
}
