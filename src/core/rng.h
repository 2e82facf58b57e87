/* Internal: the Philox-4x32-10 block function (exposed for known-answer tests). */
#ifndef TA_RNG_H
#define TA_RNG_H

#include <stdint.h>

typedef struct { uint32_t v[4]; } ta_philox4;
ta_philox4 ta_philox4x32_10(const uint32_t counter[4], const uint32_t key[2]);

#endif
