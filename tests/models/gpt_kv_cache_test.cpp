// Generation through the KV cache against forward() over the whole context: logits at every
// position, greedy text with the documented restart at half the context, and bad caches.
#include "zoff/models/gpt_kv_cache.h"

#include <gtest/gtest.h>

#include "zoff/core/error.h"
#include "zoff/models/generate.h"

namespace zoff::models::gpt_kv_cache_test {
namespace {

// fp32 logits of the same positions, summed in another order (one row against many): a few
// ulps of values ~1 in magnitude.
constexpr double kFp32LogitsAtol = 2e-5;
// bf16 compute against fp32 compute of the same weights: a few bf16 ulps of each logit.
constexpr double kBf16LogitsAtol = 0.1;

GptConfig small_config() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 12;
  return c;
}

Gpt make_model() {
  torch::manual_seed(7);
  Gpt model(small_config());
  model->eval();
  return model;
}

torch::Tensor tokens(int64_t batch, int64_t length) {
  return torch::randint(0, 256, {batch, length}, torch::kInt64);
}

// Feeds `idx` [B, T] as a first piece of `first` positions and then one position at a time;
// returns the cached logits [B, T, V].
torch::Tensor cached_logits(Gpt& model, const torch::Tensor& idx, int64_t first) {
  GptKvCache cache(model->config(), idx.size(0), model->wte->weight.options());
  std::vector<torch::Tensor> pieces{model->forward_cached(idx.narrow(1, 0, first), cache)};
  for (int64_t t = first; t < idx.size(1); ++t) {
    pieces.push_back(model->forward_cached(idx.narrow(1, t, 1), cache));
  }
  EXPECT_EQ(cache.length(), idx.size(1));
  return torch::cat(pieces, 1);
}

TEST(GptKvCache, LogitsAtEveryPositionAreThoseOfForwardOverTheWholeContext) {
  Gpt model = make_model();
  torch::NoGradGuard no_grad;
  const torch::Tensor idx = tokens(2, 12);  // the whole context, two sequences
  const torch::Tensor want = model->forward(idx);
  for (int64_t first : {1, 5, 12}) {
    const torch::Tensor got = cached_logits(model, idx, first);
    EXPECT_LT((got - want).abs().max().item<double>(), kFp32LogitsAtol) << "first " << first;
  }
}

TEST(GptKvCache, Bf16ComputeStaysWithinBf16OfTheFp32Logits) {
  Gpt model = make_model();
  torch::NoGradGuard no_grad;
  const torch::Tensor idx = tokens(1, 12);
  const torch::Tensor want = model->forward(idx);
  model->to(torch::kBFloat16);
  const torch::Tensor got = cached_logits(model, idx, 3);
  EXPECT_EQ(got.scalar_type(), torch::kBFloat16);
  EXPECT_LT((got.to(torch::kFloat32) - want).abs().max().item<double>(), kBf16LogitsAtol);
}

// The documented policy written on forward(): a window that starts at the prompt's last
// block_size bytes and, when a byte would overflow it, restarts at the last block_size / 2.
std::string greedy_reference(Gpt& model, const std::string& prompt, int64_t n) {
  torch::NoGradGuard no_grad;
  const int64_t block = model->config().block_size, keep = block / 2;
  std::vector<int64_t> toks;
  for (unsigned char c : prompt) toks.push_back(c);
  int64_t start = std::max<int64_t>(0, static_cast<int64_t>(toks.size()) - block);
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    if (static_cast<int64_t>(toks.size()) - start > block) {
      start = static_cast<int64_t>(toks.size()) - keep;
    }
    const auto window = torch::tensor(std::vector<int64_t>(toks.begin() + start, toks.end()));
    const torch::Tensor logits = model->forward(window.unsqueeze(0));
    const int64_t next = logits[0][-1].argmax().item<int64_t>();
    toks.push_back(next);
    out.push_back(static_cast<char>(next));
  }
  return out;
}

TEST(GptKvCache, GreedyTextRestartsAtHalfTheContextAsDocumented) {
  Gpt model = make_model();
  GenerateOptions options;
  options.max_new_tokens = 40;  // three restarts of a 12-byte context
  options.temperature = 0.0;
  std::string streamed;
  options.on_token = [&](char c) { streamed.push_back(c); };
  for (const std::string prompt : {"Once", "A prompt longer than the context"}) {
    streamed.clear();
    const std::string got = generate(model, prompt, options);
    EXPECT_EQ(got, greedy_reference(model, prompt, 40)) << prompt;
    EXPECT_EQ(streamed, got) << "on_token saw every byte, in order";
  }
}

TEST(GptKvCache, SampledTextIsReproducibleAndDiffersFromAnotherSeed) {
  Gpt model = make_model();
  GenerateOptions options;
  options.max_new_tokens = 30;
  options.temperature = 1.0;
  options.seed = 5;
  const std::string a = generate(model, "The ", options);
  EXPECT_EQ(a, generate(model, "The ", options));
  options.seed = 6;
  EXPECT_NE(a, generate(model, "The ", options));
}

TEST(GptKvCache, AForeignCacheOrAnOverflowIsAUsageError) {
  Gpt model = make_model();
  torch::NoGradGuard no_grad;
  EXPECT_THROW(GptKvCache(model->config(), 0, torch::kFloat32), UsageError);
  GptKvCache two(model->config(), 2, torch::kFloat32);
  EXPECT_THROW(model->forward_cached(tokens(1, 3), two), UsageError);  // batch 1 vs 2
  GptConfig longer = small_config();
  longer.block_size = 24;
  GptKvCache other(longer, 1, torch::kFloat32);
  EXPECT_THROW(model->forward_cached(tokens(1, 3), other), UsageError);
  GptKvCache cache(model->config(), 1, torch::kFloat32);
  model->forward_cached(tokens(1, 10), cache);
  try {
    model->forward_cached(tokens(1, 3), cache);
    ADD_FAILURE() << "13 positions in a 12-position context";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("3 tokens after the cache's 10 pass block_size = 12"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(cache.length(), 10);  // the refused call added nothing
}

}  // namespace
}  // namespace zoff::models::gpt_kv_cache_test
