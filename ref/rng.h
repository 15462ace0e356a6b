/* ref/rng.h — splitmix64, the one random generator of attncheck.
 *
 * Every random choice (the generator's case stream, the inputs of a case, the
 * rows the certification samples) is drawn from it, so a seed means the same
 * thing everywhere and a case line gives the same bits on every machine.
 * splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
 * generators", OOPSLA 2014): add the golden-ratio increment, then mix. */
#ifndef ATTNCHECK_RNG_H
#define ATTNCHECK_RNG_H

#include <stdint.h>

/* Advances *state and returns the next 64 random bits. */
static inline uint64_t ac_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif
