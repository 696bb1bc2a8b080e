// Tests of the GPT model: parameter counts per preset, shapes, causal masking, attention
// against LibTorch's MultiheadAttention, overfitting a tiny batch, bf16 parameters,
// parameters living in a flat buffer, deterministic initialization and bad input.
#include "zoff/models/gpt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "zoff/core/error.h"

namespace zoff::models::gpt_test {
namespace {

constexpr double kAttentionTolerance = 1e-5;  // fp32, vs torch::nn::MultiheadAttention
constexpr double kCausalTolerance = 1e-6;
// bf16 gpt with zoff's fused kernels vs LibTorch's ops, as a fraction of the reference's
// largest magnitude (logits, or each parameter's gradient). Measured (two layers, queries and
// keys at std 0.25): logits 0.009-0.016, gradients up to 0.023 apart; with the softmax's
// scale wrong by 1.5x, 0.28-0.33 and 0.68.
constexpr double kFusedVsLibTorchTolerance = 0.06;

int64_t count_params(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

GptConfig small_config() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.block_size = 16;
  return c;
}

torch::Tensor random_tokens(int64_t B, int64_t T) { return torch::randint(0, 256, {B, T}); }

TEST(Gpt, ParamCountOfBuiltPresetsMatchesFormula) {
  for (const char* name : {"tiny", "small"}) {
    torch::manual_seed(0);
    Gpt model(gpt_preset(name));
    EXPECT_EQ(count_params(*model), gpt_param_count(gpt_preset(name))) << name;
    // Every parameter registered exactly once (the tied head adds none).
    std::set<const void*> storages;
    for (const auto& p : model->parameters()) storages.insert(p.data_ptr());
    EXPECT_EQ(storages.size(), model->parameters().size()) << name;
  }
  torch::manual_seed(0);
  Gpt odd(small_config());
  EXPECT_EQ(count_params(*odd), gpt_param_count(small_config()));
}

TEST(Gpt, PresetParamCounts) {
  EXPECT_EQ(gpt_param_count(gpt_preset("tiny")), 1'040'768);
  EXPECT_EQ(gpt_param_count(gpt_preset("small")), 14'393'088);
  EXPECT_EQ(gpt_param_count(gpt_preset("medium")), 116'893'952);
  EXPECT_EQ(gpt_param_count(gpt_preset("large")), 354'007'040);
  EXPECT_EQ(gpt_param_count(gpt_preset("xl")), 1'311'940'608);
  EXPECT_EQ(gpt_param_count(gpt_preset("1.3b")), 1'311'940'608);
  // GPT-3 shapes with a byte vocabulary, e.g. 6.7b: 256 x 4096 + 2048 x 4096
  // + 32 x (12 x 4096^2 + 13 x 4096) + 2 x 4096.
  EXPECT_EQ(gpt_param_count(gpt_preset("2.7b")), 2'523'550'720);
  EXPECT_EQ(gpt_param_count(gpt_preset("6.7b")), 6'453'600'256);
  EXPECT_EQ(gpt_param_count(gpt_preset("13b")), 12'597'381'120);
  for (const char* name : {"tiny", "small", "medium", "large", "xl", "2.7b", "6.7b", "13b"}) {
    EXPECT_NO_THROW(validate(gpt_preset(name))) << name;
  }
}

TEST(Gpt, ContextReplacesThePresetsPositionTable) {
  EXPECT_EQ(gpt_preset("6.7b", 128).block_size, 128);
  EXPECT_EQ(gpt_preset("6.7b", 0).block_size, 2048);
  EXPECT_EQ(gpt_param_count(gpt_preset("6.7b", 128)),
            gpt_param_count(gpt_preset("6.7b")) - (2048 - 128) * 4096);
  EXPECT_THROW(gpt_preset("tiny", -1), zoff::UsageError);
  EXPECT_THROW(gpt_preset("tiny", kMaxGptContext + 1), zoff::UsageError);
}

TEST(Gpt, UnknownPresetListsValidNames) {
  try {
    gpt_preset("huge");
    FAIL() << "no exception";
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("huge"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tiny, small, medium, large, xl"), std::string::npos) << msg;
  }
}

TEST(Gpt, ForwardShapeAndBadInput) {
  torch::manual_seed(0);
  Gpt model(small_config());
  EXPECT_EQ(model->forward(random_tokens(3, 16)).sizes(), (std::vector<int64_t>{3, 16, 256}));
  EXPECT_EQ(model->forward(random_tokens(1, 1)).sizes(), (std::vector<int64_t>{1, 1, 256}));
  EXPECT_THROW(model->forward(random_tokens(1, 17)), UsageError);    // > block_size
  EXPECT_THROW(model->forward(torch::zeros({2, 4})), UsageError);    // float, not tokens
  EXPECT_THROW(model->forward(random_tokens(2, 4)[0]), UsageError);  // [T], not [B, T]
  GptConfig bad = small_config();
  bad.n_embd = 30;  // not a multiple of 4 heads
  EXPECT_THROW(Gpt{bad}, UsageError);
}

TEST(Gpt, InitializationIsDeterministicGivenTheSeed) {
  torch::manual_seed(42);
  Gpt a(small_config());
  torch::manual_seed(42);
  Gpt b(small_config());
  auto pa = a->parameters(), pb = b->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i]));
}

TEST(Gpt, FutureTokensDoNotChangeEarlierLogits) {
  torch::manual_seed(1);
  Gpt model(small_config());
  torch::Tensor idx = random_tokens(2, 12);
  torch::Tensor changed = idx.clone();
  changed.index_put_({torch::indexing::Slice(), 7},
                     (idx.index({torch::indexing::Slice(), 7}) + 1) % 256);
  torch::Tensor a = model->forward(idx), b = model->forward(changed);
  using torch::indexing::Slice;
  EXPECT_TRUE(torch::allclose(a.index({Slice(), Slice(0, 7)}), b.index({Slice(), Slice(0, 7)}), 0.0,
                              kCausalTolerance));
  EXPECT_FALSE(torch::allclose(a.index({Slice(), Slice(7)}), b.index({Slice(), Slice(7)}), 0.0,
                               kCausalTolerance));
}

TEST(Gpt, AttentionMatchesTorchMultiheadAttention) {
  torch::manual_seed(2);
  const GptConfig c = small_config();
  CausalSelfAttention attn(c);
  torch::nn::MultiheadAttention ref(torch::nn::MultiheadAttentionOptions(c.n_embd, c.n_head));
  {
    torch::NoGradGuard no_grad;
    // Non-zero biases so the bias paths are compared too.
    attn->qkv->bias.normal_();
    attn->proj->bias.normal_();
    ref->in_proj_weight.copy_(attn->qkv->weight);
    ref->in_proj_bias.copy_(attn->qkv->bias);
    ref->out_proj->weight.copy_(attn->proj->weight);
    ref->out_proj->bias.copy_(attn->proj->bias);
  }
  const int64_t B = 3, T = 10;
  torch::Tensor x = torch::randn({B, T, c.n_embd});
  // LibTorch's C++ MultiheadAttention adds a float attn_mask to the scores.
  const torch::Tensor mask = torch::full({T, T}, -std::numeric_limits<float>::infinity()).triu(1);
  torch::Tensor xt = x.transpose(0, 1);  // MultiheadAttention wants [T, B, C]
  torch::Tensor expected =
      std::get<0>(ref->forward(xt, xt, xt, {}, /*need_weights=*/false, mask)).transpose(0, 1);
  torch::Tensor got = attn->forward(x);
  const double diff = (got - expected).abs().max().item<double>();
  EXPECT_LT(diff, kAttentionTolerance) << "largest difference " << diff;
}

TEST(Gpt, OverfitsATinyBatch) {
  torch::manual_seed(3);
  Gpt model(small_config());
  torch::Tensor idx = random_tokens(4, 17);
  using torch::indexing::Slice;
  torch::Tensor x = idx.index({Slice(), Slice(0, 16)}), y = idx.index({Slice(), Slice(1, 17)});
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2));
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    torch::Tensor loss = gpt_loss(model->forward(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_NEAR(first, std::log(256.0), 0.2);  // near-uniform predictions at init
  EXPECT_LT(last, 0.25 * first) << "first " << first << " last " << last;
}

TEST(Gpt, RunsWithBf16Parameters) {
  torch::manual_seed(4);
  Gpt model(small_config());
  model->to(torch::kBFloat16);
  for (const auto& p : model->parameters()) ASSERT_EQ(p.scalar_type(), torch::kBFloat16);
  torch::Tensor idx = random_tokens(2, 16);
  torch::Tensor logits = model->forward(idx);
  EXPECT_EQ(logits.scalar_type(), torch::kBFloat16);
  torch::Tensor loss = gpt_loss(logits, random_tokens(2, 16));
  ASSERT_TRUE(std::isfinite(loss.item<double>()));
  EXPECT_NEAR(loss.item<double>(), std::log(256.0), 0.3);
  loss.backward();
  for (const auto& p : model->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
  }
}

// Largest |got - want| over the largest |want|.
double relative_difference(const torch::Tensor& got, const torch::Tensor& want) {
  const auto w = want.to(torch::kFloat64), g = got.to(torch::kFloat64);
  return ((g - w).abs().max() / w.abs().max()).item<double>();
}

// With bf16 parameters the gpt takes zoff's fused LayerNorm, GELU and causal softmax; with
// the flags off, LibTorch's ops. The same weights give the same logits and gradients up to
// bf16 rounding, at a context (16) shorter than a vector of fp32 lanes and at one longer.
TEST(Gpt, Bf16FusedKernelsMatchLibTorchsOps) {
  for (const int64_t T : {16, 40}) {
    GptConfig fused = small_config();
    fused.block_size = T;
    GptConfig plain = fused;
    plain.fused_layer_norm = plain.fused_gelu = plain.fused_softmax = false;
    torch::manual_seed(6);
    Gpt a(fused), b(plain);
    {
      // Queries and keys large enough that attention is far from uniform (at GPT-2's init
      // the scores are ~0 and a wrong scale or mask would go unnoticed), then b = a.
      torch::NoGradGuard no_grad;
      auto pb = b->named_parameters();
      for (auto& item : a->named_parameters()) {
        if (item.key().find("attn.qkv.weight") != std::string::npos) item.value().normal_(0, 0.25);
        pb[item.key()].copy_(item.value());
      }
    }
    a->to(torch::kBFloat16);
    b->to(torch::kBFloat16);
    const torch::Tensor idx = random_tokens(3, T), targets = random_tokens(3, T);
    const torch::Tensor la = a->forward(idx), lb = b->forward(idx);
    const double logits = relative_difference(la, lb);
    EXPECT_LT(logits, kFusedVsLibTorchTolerance) << "logits at T = " << T;
    gpt_loss(la, targets).backward();
    gpt_loss(lb, targets).backward();
    const auto pa = a->named_parameters(), pb = b->named_parameters();
    double worst = 0.0;
    for (const auto& item : pa) {
      const double d = relative_difference(item.value().grad(), pb[item.key()].grad());
      EXPECT_LT(d, kFusedVsLibTorchTolerance) << item.key() << " gradient at T = " << T;
      worst = std::max(worst, d);
    }
    std::printf("T = %ld: logits %.4f, worst gradient %.4f (relative)\n", static_cast<long>(T),
                logits, worst);
  }
}

// The engine may move every parameter into one flat buffer and point the parameters at
// views of it; the model must then compute from (and differentiate into) that buffer.
TEST(Gpt, WorksWithParametersAsViewsOfAFlatBuffer) {
  torch::manual_seed(5);
  Gpt model(small_config());
  torch::Tensor idx = random_tokens(2, 8);
  const torch::Tensor before = model->forward(idx).detach();
  std::vector<torch::Tensor> params = model->parameters();
  torch::Tensor flat = torch::cat([&] {
    std::vector<torch::Tensor> v;
    for (const auto& p : params) v.push_back(p.detach().reshape({-1}));
    return v;
  }());
  int64_t offset = 0;
  for (auto& p : params) {
    p.set_data(flat.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
  EXPECT_TRUE(torch::equal(model->forward(idx), before));
  gpt_loss(model->forward(idx), random_tokens(2, 8)).backward();
  for (const auto& p : params) EXPECT_TRUE(p.grad().defined());
  flat.zero_();  // LayerNorm weights 0 -> every logit 0
  EXPECT_EQ(model->forward(idx).abs().max().item<double>(), 0.0);
}

}  // namespace
}  // namespace zoff::models::gpt_test
