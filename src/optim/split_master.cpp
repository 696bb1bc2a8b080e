// The split master's array conversions: plain loops over the inline encoding, which the
// compiler vectorizes (integer adds, compares and shifts only).
#include "zoff/optim/split_master.h"

#include <cstring>
#include <type_traits>

namespace zoff::optim {
namespace {

uint32_t bits_of(const float* p) {
  uint32_t b;
  std::memcpy(&b, p, sizeof b);
  return b;
}

// The encode loop, with the settled masters written back over `master` or not (a template
// argument, so the per-step loop has no branch on it).
template <bool kWriteBack>
size_t encode(std::conditional_t<kWriteBack, float*, const float*> master, size_t n, uint16_t* copy,
              uint16_t* extension) {
  size_t settled = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t b = bits_of(master + i);
    const uint32_t s = split_master_settle(b);
    settled += s != b;
    if constexpr (kWriteBack) std::memcpy(master + i, &s, sizeof s);
    copy[i] = split_master_copy(s);
    extension[i] = split_master_extension(s);
  }
  return settled;
}

}  // namespace

void split_master_settle(float* values, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t s = split_master_settle(bits_of(values + i));
    std::memcpy(values + i, &s, sizeof s);
  }
}

size_t split_master_encode(float* master, size_t n, uint16_t* copy, uint16_t* extension) {
  return encode<true>(master, n, copy, extension);
}

size_t split_master_encode_from(const float* master, size_t n, uint16_t* copy,
                                uint16_t* extension) {
  return encode<false>(master, n, copy, extension);
}

void split_master_decode(const uint16_t* copy, const uint16_t* extension, size_t n, float* master) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t b = split_master_join(copy[i], extension[i]);
    std::memcpy(master + i, &b, sizeof b);
  }
}

}  // namespace zoff::optim
