// A second streaming probe whose threads are OpenMP's, not zoff's pool: a bound on the Adam
// step's memory traffic that does not inherit the pool's wake-up cost at small sizes.
//
// The same Highway targets as fused_kernels.cpp; the parallel loop's outlined body inherits
// the target attributes of the function it is written in, so each target's loop is that
// target's code.
// First: it sets the SIMD targets every kernel file compiles, before Highway is included.
#include "simd_targets.h"
#undef HWY_TARGET_INCLUDE
// Resolved against the include path (<repo>/include), as in fused_kernels.cpp.
#define HWY_TARGET_INCLUDE "../src/optim/openmp_probe.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <omp.h>

#include <cstddef>
#include <cstdint>

#include "kernel_lanes-inl.h"
#include "zoff/optim/openmp_probe.h"

HWY_BEFORE_NAMESPACE();
namespace zoff {
namespace optim {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Reads p, g, m, v and writes p, m, v over n <= 16 floats (one 64-byte line of each stream):
// the fused probe's block, the traffic of adam_fp32.
HWY_INLINE void probe_line(float* HWY_RESTRICT p, const float* HWY_RESTRICT g,
                           float* HWY_RESTRICT m, float* HWY_RESTRICT v, size_t n) {
  for_each_block(n, [&](auto d, size_t i) HWY_ATTR {
    probe_block<CopyOut::kNone>(d, p + i, g + i, m + i, v + i, nullptr);
  });
}

void OpenmpProbeKernel(float* p, const float* g, float* m, float* v, size_t n, int threads) {
  const int64_t lines = static_cast<int64_t>((n + kProbeLineFloats - 1) / kProbeLineFloats);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t k = 0; k < lines; ++k) {
    const size_t at = static_cast<size_t>(k) * kProbeLineFloats;
    const size_t len = n - at < kProbeLineFloats ? n - at : kProbeLineFloats;
    probe_line(p + at, g + at, m + at, v + at, len);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace optim
}  // namespace zoff
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zoff::optim {

HWY_EXPORT(OpenmpProbeKernel);

void openmp_stream_probe(float* p, const float* g, float* m, float* v, size_t n, int threads) {
  detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(OpenmpProbeKernel)(p, g, m, v, n, threads);
}

}  // namespace zoff::optim
#endif  // HWY_ONCE
