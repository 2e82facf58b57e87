/* CPU feature detection (cpuid + xgetbv: the OS must save the wider registers). */
#include "core/core.h"
#include "kernels/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xgetbv0(void)
{
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

int ta_cpu_supports(ta_isa isa)
{
    if (isa == TA_ISA_SCALAR) return 1;
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx || !fma || !f16c) return 0;
    uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return 0; /* XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    int avx2 = (b >> 5) & 1;
    if (isa == TA_ISA_AVX2) return avx2;
    if (isa == TA_ISA_AVX512) {
        int f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
        return avx2 && f && dq && bw && vl && (xcr0 & 0xE6) == 0xE6; /* opmask, ZMM */
    }
    return 0;
}
#else
int ta_cpu_supports(ta_isa isa) { return isa == TA_ISA_SCALAR; }
#endif

const char *ta_isa_name(ta_isa isa)
{
    switch (isa) {
    case TA_ISA_SCALAR: return "scalar";
    case TA_ISA_AVX2: return "avx2";
    case TA_ISA_AVX512: return "avx512";
    }
    return "unknown";
}
