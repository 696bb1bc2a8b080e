// The read-bandwidth probe of kernels.h (read_probe), compiled per SIMD target by Highway.
// First: it sets the SIMD targets every kernel file compiles, before Highway is included.
#include "simd_targets.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "../src/optim/read_probe_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>

#include "zoff/optim/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace zoff {
namespace optim {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lines asked for ahead of the loads, into L2, as the one-row products ask for their
// weights (models/gemv_kernels.h): the hardware prefetcher stops at each 4 KiB page.
constexpr size_t kAheadBytes = 2048;
constexpr size_t kLineBytes = 64;

// Every byte loaded once into 4 independent xor chains; the 64-bit xor of the lanes comes
// back so that the loads cannot be dropped. A tail shorter than 4 vectors is skipped.
uint64_t ReadProbeKernel(const uint8_t* HWY_RESTRICT p, size_t bytes) {
  const hn::ScalableTag<uint64_t> d;
  const size_t step = 4 * hn::Lanes(d);  // 64-bit words per step
  const auto* w = reinterpret_cast<const uint64_t*>(p);
  const size_t words = bytes / sizeof(uint64_t);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  for (size_t i = 0; i + step <= words; i += step) {
    const auto* ahead = reinterpret_cast<const char*>(w + i) + kAheadBytes;
    for (size_t off = 0; off < step * sizeof(uint64_t); off += kLineBytes) {
      __builtin_prefetch(ahead + off, 0, 2);
    }
    a0 = hn::Xor(a0, hn::LoadU(d, w + i));
    a1 = hn::Xor(a1, hn::LoadU(d, w + i + hn::Lanes(d)));
    a2 = hn::Xor(a2, hn::LoadU(d, w + i + 2 * hn::Lanes(d)));
    a3 = hn::Xor(a3, hn::LoadU(d, w + i + 3 * hn::Lanes(d)));
  }
  const auto all = hn::Xor(hn::Xor(a0, a1), hn::Xor(a2, a3));
  uint64_t out = 0;
  for (size_t l = 0; l < hn::Lanes(d); ++l) out ^= hn::ExtractLane(all, l);
  return out;
}

}  // namespace HWY_NAMESPACE
}  // namespace optim
}  // namespace zoff
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zoff::optim {

HWY_EXPORT(ReadProbeKernel);

uint64_t read_probe(const void* p, size_t bytes) {
  detail::ensure_simd_env_applied();
  return HWY_DYNAMIC_DISPATCH(ReadProbeKernel)(static_cast<const uint8_t*>(p), bytes);
}

}  // namespace zoff::optim
#endif  // HWY_ONCE
