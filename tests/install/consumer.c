/* Uses the installed header and library: a small matrix product checked by hand. */
#include <stdio.h>
#include <tensorattn.h>

int main(void)
{
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1}, c[4];
    /* [2x3] x [3x2] */
    if (ta_sgemm(c, 2, 1, a, 3, 1, b, 2, 1, 2, 2, 3, 1.0f, 0.0f) != TA_OK) {
        fprintf(stderr, "%s\n", ta_last_error());
        return 1;
    }
    float want[4] = {1 + 3, 2 + 3, 4 + 6, 5 + 6};
    for (int i = 0; i < 4; i++)
        if (c[i] != want[i]) return 1;
    printf("consumer ok: tensorattn %s\n", ta_version());
    return 0;
}
