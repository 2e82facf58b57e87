/* Replays the fuzzers' committed seed corpora (fuzz/corpus/<target>/) and the inputs
 * that once failed (tests/regressions/<target>/) through the same harnesses, built
 * here with gcc and without libFuzzer, so that `make test`, `make sanitize` and
 * `make valgrind` keep checking every input a fuzzer ever found interesting or
 * harmful. Targets: einsum, npy, safetensors (the CLI target needs the CLI sources
 * linked in; its regressions become cases of tests/test_cli_faults.c). */
#include "ta_test.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

#define LLVMFuzzerTestOneInput fuzz_einsum_one
#include "../fuzz/fuzz_einsum.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_npy_one
#include "../fuzz/fuzz_npy.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_safetensors_one
#include "../fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput

#ifndef TA_SOURCE_DIR
#define TA_SOURCE_DIR TA_FIXTURE_DIR "/../.."
#endif

/* Runs one() on every file of dir; returns how many (0 if the folder is absent). */
static int replay_dir(const char *dir, int (*one)(const uint8_t *, size_t))
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        static uint8_t buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        one(buf, n);
        count++;
    }
    closedir(d);
    return count;
}

static void replay(const char *target, int (*one)(const uint8_t *, size_t))
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/fuzz/corpus/%s", TA_SOURCE_DIR, target);
    int seeds = replay_dir(dir, one);
    snprintf(dir, sizeof dir, "%s/tests/regressions/%s", TA_SOURCE_DIR, target);
    int regressions = replay_dir(dir, one);
    print_message("  %s: %d seed(s), %d regression input(s)\n", target, seeds, regressions);
    assert_true(seeds > 0);
}

static void test_einsum(void **s) { (void)s; replay("einsum", fuzz_einsum_one); }
static void test_npy(void **s) { (void)s; replay("npy", fuzz_npy_one); }
static void test_safetensors(void **s) { (void)s; replay("safetensors", fuzz_safetensors_one); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_einsum),
        cmocka_unit_test(test_npy),
        cmocka_unit_test(test_safetensors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
