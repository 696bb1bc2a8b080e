// Which SIMD instruction set the fused optimizer kernels run with, and how to force a lower one.
#pragma once

#include <string>
#include <vector>

namespace zoff::optim {

// The kernels are compiled side by side for AVX-512 (Highway's AVX3), AVX2 (+FMA, F16C) and
// one-lane scalar code (Highway's HWY_SCALAR); the best one the CPU runs is chosen at run time.
//
// Environment variable ZOFF_SIMD = avx512 | avx2 | scalar | best forces that level (at most
// the best the CPU supports). It is read once, before the first fused kernel runs; a value
// that is unknown, or a level the CPU lacks, throws zoff::UsageError naming ZOFF_SIMD.
enum class SimdLevel { kBest, kAvx512, kAvx2, kScalar };

// "avx512" | "avx2" | "scalar" | "best" -> level; anything else throws zoff::UsageError.
SimdLevel parse_simd_level(const std::string& name);
std::string simd_level_name(SimdLevel level);

// The levels this binary has kernels for and this CPU can run, best first, excluding kBest.
std::vector<SimdLevel> supported_simd_levels();

// Forces `level` for all later kernel calls in this process (kBest: the CPU's best).
// Overrides ZOFF_SIMD. Throws zoff::UsageError if the CPU cannot run `level`. Not meant to
// be called while kernels run on other threads. It works through hwy::DisableTargets, which
// is process-wide: any other Highway code in the process is limited the same way.
void force_simd_level(SimdLevel level);

// Reads ZOFF_SIMD now and applies it (unset or empty: kBest). Called automatically once.
void apply_simd_level_from_env();

// Highway's name of the target the kernels dispatch to now: "AVX3", "AVX2" or "SCALAR".
std::string active_simd_target();

}  // namespace zoff::optim
