// Greedy and top-k temperature sampling from a GPT, byte by byte.
#include "zoff/models/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "zoff/core/error.h"

namespace zoff::models {

namespace {

// Uniform doubles in [0, 1) from SplitMix64, the same generator as zoff/data/splitmix64.h,
// kept private so that models/ does not depend on data/ (it would belong in core/).
class UniformStream {
 public:
  explicit UniformStream(uint64_t seed) : state_(seed) {}
  double next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;  // 53 random bits
  }

 private:
  uint64_t state_;
};

// Picks an index from logits (fp64, [V]) per the rules in generate.h.
int64_t pick(const std::vector<double>& logits, double temperature, int64_t top_k,
             UniformStream& rng) {
  const auto V = static_cast<int64_t>(logits.size());
  std::vector<int64_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), int64_t{0});
  // Largest first; ties broken by the lower index so the order is fully determined.
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  if (temperature == 0.0) return order[0];
  const int64_t k = (top_k == 0 || top_k > V) ? V : top_k;
  const double max_logit = logits[size_t(order[0])];
  std::vector<double> weights(static_cast<size_t>(k));
  double total = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    weights[size_t(i)] = std::exp((logits[size_t(order[size_t(i)])] - max_logit) / temperature);
    total += weights[size_t(i)];
  }
  double u = rng.next() * total;
  for (int64_t i = 0; i < k; ++i) {
    u -= weights[size_t(i)];
    if (u < 0.0) return order[size_t(i)];
  }
  return order[size_t(k - 1)];  // rounding left u a hair above 0
}

}  // namespace

std::string generate(Gpt& model, const std::string& prompt, int64_t max_new_tokens,
                     double temperature, int64_t top_k, uint64_t seed) {
  ZOFF_CHECK_ARG(!prompt.empty(), "generate: the prompt is empty (need at least one byte)");
  ZOFF_CHECK_ARG(max_new_tokens >= 0, "generate: max_new_tokens = ", max_new_tokens,
                 ": must be >= 0");
  ZOFF_CHECK_ARG(std::isfinite(temperature) && temperature >= 0.0,
                 "generate: temperature = ", temperature, ": must be >= 0");
  ZOFF_CHECK_ARG(top_k >= 0, "generate: top_k = ", top_k, ": must be >= 0 (0 = all)");
  const int64_t block = model->config().block_size;
  const bool was_training = model->is_training();
  model->eval();
  torch::NoGradGuard no_grad;
  UniformStream rng(seed);
  std::vector<int64_t> tokens;
  for (unsigned char c : prompt) tokens.push_back(c);
  std::string out;
  const torch::Device device = model->wte->weight.device();
  for (int64_t n = 0; n < max_new_tokens; ++n) {
    const auto ctx = std::min<int64_t>(block, static_cast<int64_t>(tokens.size()));
    torch::Tensor idx = torch::tensor(std::vector<int64_t>(tokens.end() - ctx, tokens.end()),
                                      torch::kInt64)
                            .to(device)
                            .unsqueeze(0);                                           // [1, ctx]
    torch::Tensor last = model->forward(idx)[0][ctx - 1].to(torch::kFloat64).cpu();  // [V]
    std::vector<double> logits(last.data_ptr<double>(), last.data_ptr<double>() + last.numel());
    const int64_t next = pick(logits, temperature, top_k, rng);
    tokens.push_back(next);
    out.push_back(static_cast<char>(static_cast<unsigned char>(next)));
  }
  model->train(was_training);
  return out;
}

}  // namespace zoff::models
