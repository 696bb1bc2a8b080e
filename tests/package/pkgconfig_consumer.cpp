// A user's program built with `pkg-config --cflags --libs zoff` (no CMake): the .pc file's
// include path and libraries are enough to compile and link against zoff.
#include <zoff/estimate/memory_estimate.h>

#include <cstdio>

int main() {
  zoff::estimate::EstimateOptions options;
  options.params = 7500000000;
  options.ranks = 64;
  options.precision = zoff::estimate::Precision::kFp16;
  options.fp32_gradients = false;
  const auto estimate = zoff::estimate::estimate_memory(options);
  std::printf("pkg-config consumer: stage 0 %.2f GB\n",
              static_cast<double>(estimate.stages[0].per_rank_bytes) / 1e9);
  return estimate.stages[0].per_rank_bytes == 120000000000 ? 0 : 1;
}
