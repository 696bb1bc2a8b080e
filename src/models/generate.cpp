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

void check_options(const std::string& prompt, const GenerateOptions& o) {
  ZOFF_CHECK_ARG(!prompt.empty(), "generate: the prompt is empty (need at least one byte)");
  ZOFF_CHECK_ARG(o.max_new_tokens >= 0, "generate: max_new_tokens = ", o.max_new_tokens,
                 ": must be >= 0");
  ZOFF_CHECK_ARG(std::isfinite(o.temperature) && o.temperature >= 0.0,
                 "generate: temperature = ", o.temperature, ": must be >= 0");
  ZOFF_CHECK_ARG(o.top_k >= 0, "generate: top_k = ", o.top_k, ": must be >= 0 (0 = all)");
}

// The logits of one position ([V], any dtype and device) as doubles on the CPU.
std::vector<double> logits_of(const torch::Tensor& row) {
  const torch::Tensor wide = row.to(torch::kFloat64).cpu().contiguous();
  return std::vector<double>(wide.data_ptr<double>(), wide.data_ptr<double>() + wide.numel());
}

torch::Tensor as_input(std::vector<int64_t>::const_iterator begin,
                       std::vector<int64_t>::const_iterator end, const torch::Device& device) {
  return torch::tensor(std::vector<int64_t>(begin, end), torch::kInt64).to(device).unsqueeze(0);
}

// Picks each next byte from `next_logits(tokens)` (tokens so far, the new byte last).
std::string sample(std::vector<int64_t>& tokens, const GenerateOptions& o,
                   const std::function<std::vector<double>(bool first)>& next_logits) {
  UniformStream rng(o.seed);
  std::string out;
  for (int64_t n = 0; n < o.max_new_tokens; ++n) {
    const int64_t next = pick(next_logits(n == 0), o.temperature, o.top_k, rng);
    tokens.push_back(next);
    const char byte = static_cast<char>(static_cast<unsigned char>(next));
    out.push_back(byte);
    if (o.on_token) o.on_token(byte);
  }
  return out;
}

// One forward per new byte through the cache (see GenerateOptions::kv_cache).
std::string generate_cached(Gpt& model, std::vector<int64_t>& tokens, const GenerateOptions& o,
                            const torch::Device& device) {
  const int64_t block = model->config().block_size;
  const int64_t keep = std::max<int64_t>(1, block / 2);
  GptKvCache cache(model->config(), 1, model->wte->weight.options());
  // Rebuilds the cache from tokens[begin..] and returns the last position's logits.
  auto refill = [&](int64_t begin) {
    cache.clear();
    const torch::Tensor logits =
        model->forward_cached(as_input(tokens.begin() + begin, tokens.end(), device), cache);
    return logits_of(logits[0][logits.size(1) - 1]);
  };
  const auto prompt_length = static_cast<int64_t>(tokens.size());
  return sample(tokens, o, [&](bool first) {
    if (first) return refill(std::max<int64_t>(0, prompt_length - block));
    if (cache.length() == block) return refill(static_cast<int64_t>(tokens.size()) - keep);
    return logits_of(
        model->forward_cached(as_input(tokens.end() - 1, tokens.end(), device), cache)[0][0]);
  });
}

// Forward over the last block_size bytes for every new byte.
std::string generate_windowed(Gpt& model, std::vector<int64_t>& tokens, const GenerateOptions& o,
                              const torch::Device& device) {
  const int64_t block = model->config().block_size;
  return sample(tokens, o, [&](bool) {
    const auto ctx = std::min<int64_t>(block, static_cast<int64_t>(tokens.size()));
    return logits_of(
        model->forward(as_input(tokens.end() - ctx, tokens.end(), device))[0][ctx - 1]);
  });
}

}  // namespace

std::string generate(Gpt& model, const std::string& prompt, const GenerateOptions& options) {
  check_options(prompt, options);
  const bool was_training = model->is_training();
  model->eval();
  torch::NoGradGuard no_grad;
  std::vector<int64_t> tokens;
  for (unsigned char c : prompt) tokens.push_back(c);
  const torch::Device device = model->wte->weight.device();
  std::string out = options.kv_cache ? generate_cached(model, tokens, options, device)
                                     : generate_windowed(model, tokens, options, device);
  model->train(was_training);
  return out;
}

std::string generate(Gpt& model, const std::string& prompt, int64_t max_new_tokens,
                     double temperature, int64_t top_k, uint64_t seed) {
  GenerateOptions options;
  options.max_new_tokens = max_new_tokens;
  options.temperature = temperature;
  options.top_k = top_k;
  options.seed = seed;
  options.kv_cache = false;
  return generate(model, prompt, options);
}

}  // namespace zoff::models
