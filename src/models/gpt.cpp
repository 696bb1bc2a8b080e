// The GPT modules: causal attention, pre-LN blocks, the tied-head language model.
#include "zoff/models/gpt.h"

#include <cmath>

#include "zoff/core/error.h"
#include "zoff/unit/activation_checkpoint.h"
#include "zoff/unit/unit_call.h"

namespace zoff::models {

namespace {
constexpr double kInitStd = 0.02;  // GPT-2's initializer range
constexpr double kLayerNormEps = 1e-5;

torch::nn::LayerNorm layer_norm(int64_t width) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}).eps(kLayerNormEps));
}

torch::Tensor maybe_dropout(const torch::Tensor& x, double p, bool training) {
  // p == 0 must not touch any RNG, so skip the op entirely.
  return p > 0.0 ? torch::dropout(x, p, training) : x;
}
}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptConfig& config)
    : n_head_(config.n_head), dropout_(config.dropout) {
  qkv = register_module("qkv", torch::nn::Linear(config.n_embd, 3 * config.n_embd));
  proj = register_module("proj", torch::nn::Linear(config.n_embd, config.n_embd));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / n_head_;
  std::vector<torch::Tensor> parts = qkv(x).split(C, /*dim=*/2);  // 3 x [B, T, C]
  auto heads = [&](const torch::Tensor& t) {                      // [B, T, C] -> [B, nh, T, hs]
    return t.view({B, T, n_head_, hs}).transpose(1, 2);
  };
  const torch::Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
  torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hs)));
  // Built per call (T x T bools) rather than kept as a buffer: nothing but parameters lives
  // in the module, and T varies between training and generation.
  const torch::Tensor future =
      torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
  att = torch::softmax(att.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
  att = maybe_dropout(att, dropout_, is_training());
  torch::Tensor y = torch::matmul(att, v);             // [B, nh, T, hs]
  y = y.transpose(1, 2).contiguous().view({B, T, C});  // heads side by side again
  return maybe_dropout(proj(y), dropout_, is_training());
}

GptBlockImpl::GptBlockImpl(const GptConfig& config) : dropout_(config.dropout) {
  ln_1 = register_module("ln_1", layer_norm(config.n_embd));
  attn = register_module("attn", CausalSelfAttention(config));
  ln_2 = register_module("ln_2", layer_norm(config.n_embd));
  fc = register_module("fc", torch::nn::Linear(config.n_embd, 4 * config.n_embd));
  mlp_proj = register_module("mlp_proj", torch::nn::Linear(4 * config.n_embd, config.n_embd));
}

torch::Tensor GptBlockImpl::forward(torch::Tensor x) {
  x = x + attn(ln_1(x));
  return x + maybe_dropout(mlp_proj(torch::gelu(fc(ln_2(x)))), dropout_, is_training());
}

GptImpl::GptImpl(const GptConfig& config) : config_(config) {
  validate(config_);
  wte = register_module("wte", torch::nn::Embedding(config.vocab_size, config.n_embd));
  wpe = register_module("wpe", torch::nn::Embedding(config.block_size, config.n_embd));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t l = 0; l < config.n_layer; ++l) blocks->push_back(GptBlock(config));
  ln_f = register_module("ln_f", layer_norm(config.n_embd));
  init_weights();
}

void GptImpl::init_weights() {
  torch::NoGradGuard no_grad;
  const double resid_std = kInitStd / std::sqrt(2.0 * double(config_.n_layer));
  torch::nn::init::normal_(wte->weight, 0.0, kInitStd);
  torch::nn::init::normal_(wpe->weight, 0.0, kInitStd);
  for (const auto& module : *blocks) {
    auto* block = module->as<GptBlockImpl>();
    for (auto* linear : {block->attn->qkv.get(), block->attn->proj.get(), block->fc.get(),
                         block->mlp_proj.get()}) {
      const bool residual = linear == block->attn->proj.get() || linear == block->mlp_proj.get();
      torch::nn::init::normal_(linear->weight, 0.0, residual ? resid_std : kInitStd);
      torch::nn::init::zeros_(linear->bias);
    }
  }
  // LayerNorms already start at weight 1, bias 0.
}

torch::Tensor GptImpl::forward(const torch::Tensor& idx) {
  ZOFF_CHECK_ARG(idx.dim() == 2 && idx.scalar_type() == torch::kInt64,
                 "gpt: input must be int64 [B, T], got ", idx.sizes(), " ", idx.scalar_type());
  const int64_t T = idx.size(1);
  ZOFF_CHECK_ARG(T >= 1 && T <= config_.block_size, "gpt: sequence length ", T,
                 " must be in [1, block_size = ", config_.block_size, "]");
  const torch::Tensor pos = torch::arange(T, idx.options());  // [T]
  // Each with_unit / unit_forward marks a ZeRO stage-3 unit (a no-op without an engine).
  const torch::Tensor tok = zoff::with_unit(*wte, [&] { return wte(idx); });  // [B, T, C]
  torch::Tensor x = tok + zoff::with_unit(*wpe, [&] { return wpe(pos); });
  x = maybe_dropout(x, config_.dropout, is_training());
  for (const auto& block : *blocks) {
    auto run = [block](const torch::Tensor& h) {
      return zoff::with_unit(*block, [&] { return block->as<GptBlockImpl>()->forward(h); });
    };
    x = activation_checkpointing_ ? zoff::activation_checkpoint(run, x) : run(x);
  }
  x = zoff::unit_forward(ln_f, x);
  // Tied head: logits = x @ wte^T, read from the registered weight at every call.
  return zoff::with_unit(*wte, [&] { return torch::matmul(x, wte->weight.t()); });  // [B, T, V]
}

torch::Tensor gpt_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  const int64_t V = logits.size(-1);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, V}).to(torch::kFloat32),
                                              targets.reshape({-1}));
}

}  // namespace zoff::models
