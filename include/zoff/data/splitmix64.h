// A tiny PRNG (SplitMix64) whose integer output is identical on every rank, platform and
// compiler; used where LibTorch's global RNG state must not leak in.
#pragma once

#include <cmath>
#include <cstdint>

namespace zoff::data {

// SplitMix64 (Steele, Lea, Flood 2014): a 64-bit state advanced by a Weyl increment and
// passed through a bijective mixer. Cheap to seed from any (seed, counter) pair.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    return mix(state_);
  }

  // Uniform integer in [0, bound), bound >= 1, without modulo bias (rejection sampling on
  // the top of the 64-bit range), so the result does not depend on any std:: distribution.
  uint64_t below(uint64_t bound) {
    const uint64_t limit = UINT64_MAX - (UINT64_MAX % bound + 1) % bound;
    uint64_t x = next();
    while (x > limit) x = next();
    return x % bound;
  }

  // Uniform double in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  // Standard normal draw (Box-Muller; uses two uniforms per call, no cached spare so the
  // stream position depends only on the number of calls). Goes through libm's log/cos, so
  // unlike next()/below() it is only guaranteed identical across ranks of one build.
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log() stays finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  // The mixer alone: a bijection on 64-bit words, used to derive independent seeds from
  // (seed, counter) pairs.
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // A seed for stream `counter` of `seed`; distinct (seed, counter) give unrelated streams.
  static uint64_t derive(uint64_t seed, uint64_t counter) {
    return mix(mix(seed) ^ (counter * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull));
  }

 private:
  uint64_t state_;
};

}  // namespace zoff::data
