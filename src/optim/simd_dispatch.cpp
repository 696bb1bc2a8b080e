// Chooses the SIMD target of the fused kernels: the CPU's best, or a lower one via ZOFF_SIMD.
#include "zoff/optim/simd_dispatch.h"

#include <cpuid.h>
#include <hwy/targets.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "simd_targets.h"
#include "zoff/core/error.h"

namespace zoff::optim {
namespace {

// Highway target bits of each level: AVX3_DL is AVX-512 with extra instructions.
constexpr int64_t kAvx512Bits = HWY_AVX3 | HWY_AVX3_DL;
constexpr int64_t kAvx2Bits = HWY_AVX2;
constexpr int64_t kScalarBits = HWY_SCALAR | HWY_EMU128;

int64_t level_bits(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512:
      return kAvx512Bits;
    case SimdLevel::kAvx2:
      return kAvx2Bits;
    case SimdLevel::kScalar:
      return kScalarBits;
    case SimdLevel::kBest:
      break;
  }
  return 0;
}

// Targets this binary has kernels for and this CPU runs, read once before any forcing.
int64_t runnable_targets() {
  static const int64_t mask = [] {
    hwy::SetSupportedTargetsForTest(0);  // the real CPU, not a mock
    hwy::DisableTargets(0);
    return hwy::SupportedTargets() & detail::compiled_simd_targets();
  }();
  return mask;
}

std::once_flag g_env_once;
std::atomic<bool> g_env_applied{false};

void apply_level(SimdLevel level, const std::string& source) {
  const int64_t runnable = runnable_targets();
  if (level == SimdLevel::kBest) {
    hwy::DisableTargets(0);
    return;
  }
  const int64_t bits = level_bits(level);
  ZOFF_CHECK_ARG((runnable & bits) != 0, source, " = ", simd_level_name(level),
                 ": this CPU or binary has no such SIMD target (try scalar)");
  // Every target better than the wanted one is disabled. Highway target bits are ordered
  // best = lowest bit, so "better" means a lower bit.
  const int64_t lowest_wanted = bits & -bits;
  hwy::DisableTargets(runnable & (lowest_wanted - 1));
}

}  // namespace

SimdLevel parse_simd_level(const std::string& name) {
  if (name == "best" || name.empty()) return SimdLevel::kBest;
  if (name == "avx512") return SimdLevel::kAvx512;
  if (name == "avx2") return SimdLevel::kAvx2;
  if (name == "scalar") return SimdLevel::kScalar;
  throw UsageError("ZOFF_SIMD = '" + name + "': must be avx512, avx2, scalar or best");
}

std::string simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kBest:
      return "best";
    case SimdLevel::kAvx512:
      return "avx512";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kScalar:
      return "scalar";
  }
  return "unknown";
}

std::vector<SimdLevel> supported_simd_levels() {
  const int64_t runnable = runnable_targets();
  std::vector<SimdLevel> levels;
  for (SimdLevel level : {SimdLevel::kAvx512, SimdLevel::kAvx2, SimdLevel::kScalar}) {
    if ((runnable & level_bits(level)) != 0) levels.push_back(level);
  }
  return levels;
}

void force_simd_level(SimdLevel level) {
  detail::ensure_simd_env_applied();
  apply_level(level, "SIMD level");
}

void apply_simd_level_from_env() {
  const char* value = std::getenv("ZOFF_SIMD");
  apply_level(parse_simd_level(value == nullptr ? "" : value), "ZOFF_SIMD");
}

std::string active_simd_target() { return detail::dispatched_target_name(); }

namespace detail {
bool cpu_converts_bf16() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    // CPUID leaf 7, sub-leaf 1: EAX bit 5 is AVX512_BF16.
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0 && ((a >> 5) & 1u) != 0;
  }();
  return has;
}

void ensure_simd_env_applied() {
  if (g_env_applied.load(std::memory_order_acquire)) return;
  std::call_once(g_env_once, [] {
    apply_simd_level_from_env();
    g_env_applied.store(true, std::memory_order_release);
  });
}
}  // namespace detail

}  // namespace zoff::optim
