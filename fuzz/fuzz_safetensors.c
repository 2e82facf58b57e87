/* libFuzzer target: the .safetensors reader. The input is the file: open must accept
 * it or return a status; when it opens, every tensor is listed, found by name and read,
 * and the file is tried as a layer of each layout (ta_attention_load). */
#include "fuzz_common.h"
#include "tensorattn.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0) return 0;
    ta_safetensors *st = NULL;
    if (ta_safetensors_open(&st, path) == TA_OK) {
        int n = ta_safetensors_count(st);
        if (n < 0) abort();
        for (int i = 0; i < n; i++) {
            const char *name = ta_safetensors_name(st, i);
            if (!name || ta_safetensors_find(st, name) != i) abort();
            ta_tensor t = {0};
            if (ta_safetensors_get(&t, st, name) == TA_OK) {
                float sum = 0; /* touch every element: ASan checks the extent */
                for (int64_t e = 0; e < ta_tensor_numel(&t); e++) sum += ((float *)t.data)[e];
                (void)sum;
            }
            ta_tensor_free(&t);
        }
        if (ta_safetensors_name(st, n) != NULL || ta_safetensors_name(st, -1) != NULL) abort();
        /* a name the file lacks must be refused (the fuzzer may well name a tensor
         * "no such tensor": check the claim against find first) */
        ta_tensor t = {0};
        if (ta_safetensors_find(st, "no such tensor") < 0 &&
            ta_safetensors_get(&t, st, "no such tensor") == TA_OK)
            abort();
        ta_safetensors_free(st);
    }
    for (int layout = 0; layout < 2; layout++) {
        ta_attention *layer = NULL;
        if (ta_attention_load(&layer, path, (ta_layout)layout, 1 + (int64_t)(size % 3)) == TA_OK)
            ta_attention_free(layer);
    }
    close(fd);
    return 0;
}
