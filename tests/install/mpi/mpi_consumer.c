/* A program of tensorattn_mpi.h: links ta_sdpa_context_parallel (and every internal
 * function it pulls in) without calling it; ta_cp_scheme_name needs no MPI_Init. */
#include <stdio.h>
#include <string.h>
#include <tensorattn_mpi.h>
int main(int argc, char **argv)
{
    (void)argv;
    if (argc > 99)
        return (int)ta_sdpa_context_parallel(MPI_COMM_WORLD, TA_CP_ZIGZAG, NULL, NULL, NULL, NULL,
                                             NULL, NULL);
    printf("mpi consumer: %s\n", ta_cp_scheme_name(TA_CP_ZIGZAG));
    return strcmp(ta_cp_scheme_name(TA_CP_ZIGZAG), "zigzag") != 0;
}
