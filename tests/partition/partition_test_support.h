// Shared pieces of the partition tests: named 1-D parameters of given sizes.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace zoff::partition::testing {

// Parameters "p0", "p1", ... with sizes[i] random elements each.
inline std::vector<std::pair<std::string, torch::Tensor>> make_params(
    const std::vector<int64_t>& sizes) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.emplace_back("p" + std::to_string(i), torch::randn({sizes[i]}));
  }
  return out;
}

}  // namespace zoff::partition::testing
