// Internal link between the Highway kernels and the dispatch control (not a public header).
#pragma once

#include <cstdint>
#include <string>

namespace zoff::optim::detail {

// Applies ZOFF_SIMD once per process (thread-safe); later calls are one atomic load.
void ensure_simd_env_applied();

// The Highway targets (HWY_TARGETS bit mask) fused_kernels.cpp was compiled for.
int64_t compiled_simd_targets();

// Highway's name of the target HWY_DYNAMIC_DISPATCH picks now.
std::string dispatched_target_name();

}  // namespace zoff::optim::detail
