// Internal link between the Highway kernels and the dispatch control (not a public header).
// Each kernel file includes it before any Highway header.
#pragma once

// The targets every kernel file compiles: AVX-512, AVX2 and scalar. SSSE3/SSE4 would cost
// compile time and add no coverage; and every file must compile the same set, since
// simd_dispatch.cpp forces one level for all of them.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#endif

#include <cstdint>
#include <string>

namespace zoff::optim::detail {

// Applies ZOFF_SIMD once per process (thread-safe); later calls are one atomic load.
void ensure_simd_env_applied();

// The Highway targets (HWY_TARGETS bit mask) fused_kernels.cpp was compiled for.
int64_t compiled_simd_targets();

// Highway's name of the target HWY_DYNAMIC_DISPATCH picks now.
std::string dispatched_target_name();

// True when the CPU has AVX512_BF16 (vcvtneps2bf16): Highway 1.0.3's AVX-512 targets do not
// include it, so the kernels that use it check at run time.
bool cpu_converts_bf16();

}  // namespace zoff::optim::detail
