// The split master's array conversions: branch-free loops over the encoding of
// split_master.h (integer adds, compares and shifts only), which the compiler vectorizes;
// cloned for AVX-512, AVX2 and the baseline, the best the CPU runs chosen at load time
// (every step of a split master joins and splits each of its elements once).
#include "zoff/optim/split_master.h"

#include <cstring>
#include <ios>
#include <type_traits>

#include "zoff/core/error.h"

namespace zoff::optim {
namespace {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// -O3: the loops vectorize only past -O2's very cheap cost model (the file is built in a
// batch of others, so the attribute and not a per-file flag).
#define ZOFF_SPLIT_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), optimize("O3")))
#else
#define ZOFF_SPLIT_CLONES
#endif

__attribute__((always_inline)) inline uint32_t bits_of(const float* p) {
  uint32_t b;
  std::memcpy(&b, p, sizeof b);
  return b;
}

// split_master.h's functions with their branches as 0/1 arithmetic, equal for every
// pattern (tests/optim/split_master_test.cpp checks the arrays against them).
__attribute__((always_inline)) inline uint32_t is_nan(uint32_t bits) {
  return static_cast<uint32_t>((bits & 0x7F800000u) == 0x7F800000u) &
         static_cast<uint32_t>((bits & 0x007FFFFFu) != 0);
}

__attribute__((always_inline)) inline uint32_t settle(uint32_t b) {
  const uint32_t odd_tie = static_cast<uint32_t>((b & 0x1FFFFu) == 0x18000u);
  return b + (odd_tie & (is_nan(b) ^ 1u));
}

__attribute__((always_inline)) inline uint16_t copy_of(uint32_t s) {
  const uint32_t rounded = (s + 0x7FFFu + ((s >> 16) & 1u)) >> 16;
  const uint32_t quiet = (s >> 16) | 0x0040u;
  const uint32_t nan = 0u - is_nan(s);  // all ones for a NaN
  return static_cast<uint16_t>((quiet & nan) | (rounded & ~nan));
}

// The encode loop, with the settled masters written back over `master` or not (a template
// argument, so the per-step loop has no branch on it).
template <bool kWriteBack>
__attribute__((always_inline)) inline size_t encode(
    std::conditional_t<kWriteBack, float*, const float*> master, size_t n, uint16_t* copy,
    uint16_t* extension) {
  size_t settled = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t b = bits_of(master + i);
    const uint32_t s = settle(b);
    settled += s != b;
    if constexpr (kWriteBack) std::memcpy(master + i, &s, sizeof s);
    copy[i] = copy_of(s);
    extension[i] = static_cast<uint16_t>(s);
  }
  return settled;
}

}  // namespace

ZOFF_SPLIT_CLONES void split_master_settle(float* values, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t s = settle(bits_of(values + i));
    std::memcpy(values + i, &s, sizeof s);
  }
}

ZOFF_SPLIT_CLONES size_t split_master_encode(float* master, size_t n, uint16_t* copy,
                                             uint16_t* extension) {
  return encode<true>(master, n, copy, extension);
}

ZOFF_SPLIT_CLONES size_t split_master_encode_from(const float* master, size_t n, uint16_t* copy,
                                                  uint16_t* extension) {
  return encode<false>(master, n, copy, extension);
}

// Setup only, and it may throw: neither cloned nor vectorized.
void split_master_extensions(const float* settled, size_t n, uint16_t* extension, size_t first) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t b = bits_of(settled + i);
    ZOFF_CHECK(split_master_settle(b) == b, "split master: value ", first + i, " (bits 0x",
               std::hex, b, ") is not settled (optim::split_master_settle)");
    extension[i] = split_master_extension(b);
  }
}

ZOFF_SPLIT_CLONES void split_master_decode(const uint16_t* copy, const uint16_t* extension,
                                           size_t n, float* master) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t c = copy[i];
    const uint32_t e = extension[i];
    const uint32_t nan =
        static_cast<uint32_t>((c & 0x7F80u) == 0x7F80u) & static_cast<uint32_t>((c & 0x007Fu) != 0);
    const uint32_t b = ((c - (static_cast<uint32_t>(e > 0x8000u) & (nan ^ 1u))) << 16) | e;
    std::memcpy(master + i, &b, sizeof b);
  }
}

}  // namespace zoff::optim
