/* tensorattn: the command-line tool. Uses only the public header. */
#include "tensorattn.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
        printf("tensorattn %s\n", ta_version());
        return 0;
    }
    double peak = 0;
    ta_measure_fma_peak(&peak, ta_active_isa(), 1, 0.3);
    printf("isa %s peak %.1f GFLOP/s\n", ta_isa_name(ta_active_isa()), peak);
    return 0;
}
