/* run_isa ISA TEST [ARGS...]: runs the test binary TEST with TA_ARCH=ISA, so that it
 * exercises that ISA's kernels; CTest registers every "ta-test: all-isas" test through
 * it once per ISA of the table (CMakeLists.txt) with SKIP_RETURN_CODE 77.
 *   - ISA unknown to the library: exit 2 (a wrong registration);
 *   - the CPU lacks ISA: exit 77, reported as skipped, not as passed;
 *   - the CPU has it but the library would not run it (its kernel table failed the
 *     checks made when the tables are built): exit 1, a failure;
 *   - else exec TEST: its exit status is the test's. */
#define _POSIX_C_SOURCE 200809L

#include "tensorattn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: run_isa ISA TEST [ARGS...]\n");
        return 2;
    }
    int isa = 0;
    while (isa < TA_ISA_COUNT && strcmp(ta_isa_name((ta_isa)isa), argv[1]) != 0) isa++;
    if (isa == TA_ISA_COUNT) {
        fprintf(stderr, "run_isa: the library has no ISA named '%s'\n", argv[1]);
        return 2;
    }
    if (!ta_cpu_supports((ta_isa)isa)) {
        printf("run_isa: skipped: this CPU cannot run %s\n", argv[1]);
        return 77;
    }
    if (setenv("TA_ARCH", argv[1], 1) != 0) {
        perror("run_isa: setenv");
        return 2;
    }
    if (ta_active_isa() != (ta_isa)isa) {
        fprintf(stderr, "run_isa: TA_ARCH=%s: the library runs %s instead\n", argv[1],
                ta_isa_name(ta_active_isa()));
        return 1;
    }
    execv(argv[2], argv + 2);
    fprintf(stderr, "run_isa: cannot run %s: ", argv[2]);
    perror(NULL);
    return 2;
}
