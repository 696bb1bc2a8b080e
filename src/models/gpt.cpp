// The GPT modules: causal attention, pre-LN blocks, the tied-head language model.
#include "zoff/models/gpt.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>
#include <memory>

#include "zoff/core/error.h"
#include "zoff/data/splitmix64.h"
#include "zoff/models/causal_attention.h"
#include "zoff/models/fused_gelu.h"
#include "zoff/models/fused_layer_norm.h"
#include "zoff/models/widened_products.h"
#include "zoff/unit/activation_checkpoint.h"
#include "zoff/unit/unit_call.h"

namespace zoff::models {

namespace {
constexpr double kInitStd = 0.02;  // GPT-2's initializer range
constexpr double kLayerNormEps = 1e-5;

torch::nn::LayerNorm layer_norm(int64_t width) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}).eps(kLayerNormEps));
}

// LayerNorm in fp32 when x is 16-bit, the result rounded back to x's dtype: what
// torch.autocast does on CPU, where LibTorch 1.13's bf16 layer_norm takes ~3x as long as
// widening, normalizing in fp32 and rounding (and is less accurate). bf16 x with `fused`:
// the same arithmetic in one kernel each way (gpt small's shape, one thread, forward and
// backward: ~6x faster than the three ops and their casts). fp32 x: ln(x) itself.
torch::Tensor norm(torch::nn::LayerNorm& ln, const torch::Tensor& x, bool fused) {
  if (x.scalar_type() == torch::kFloat32) return ln(x);
  if (fused && x.scalar_type() == torch::kBFloat16 && x.is_cpu()) {
    return fused_layer_norm(x, ln->weight, ln->bias, ln->options.eps());
  }
  namespace F = torch::nn::functional;
  const auto wide =
      F::layer_norm(x.to(torch::kFloat32), F::LayerNormFuncOptions(ln->options.normalized_shape())
                                               .weight(ln->weight.to(torch::kFloat32))
                                               .bias(ln->bias.to(torch::kFloat32))
                                               .eps(ln->options.eps()));
  return wide.to(x.scalar_type());
}

// GELU; bf16 x with `fused`: LibTorch's forward and zoff's backward, one exponential per
// element where LibTorch's takes an erf and an exp (gpt small's shapes, one thread, PyTorch
// 2.15: forward + backward 13.1 vs 17.4 ms; fused_gelu.h, docs/figures.md).
torch::Tensor gelu(const torch::Tensor& x, bool fused) {
  if (fused && x.scalar_type() == torch::kBFloat16 && x.is_cpu()) return fused_gelu(x);
  return torch::gelu(x);
}

// A Linear layer through ATen's linear, the op PyTorch's nn.Linear calls. LibTorch's C++
// torch::nn::Linear (functional::linear) fuses the bias into the GEMM only for 2-D input
// and adds it separately otherwise, a second rounding in bf16; ATen's also fuses it for
// contiguous 3-D input. Same arithmetic as a Python GPT, and one rounding fewer. fp16, and
// bf16 on CPUs without bf16 dot products: in fp32, rounded once (widened_products.h).
torch::Tensor linear(torch::nn::Linear& layer, const torch::Tensor& x) {
  return widened_linear(x, layer->weight, layer->bias);
}

torch::Tensor maybe_dropout(const torch::Tensor& x, double p, bool training) {
  // p == 0 must not touch any RNG, so skip the op entirely.
  return p > 0.0 ? torch::dropout(x, p, training) : x;
}
}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptConfig& config)
    : n_head_(config.n_head),
      dropout_(config.dropout),
      fused_softmax_(config.fused_softmax),
      attention_(config.attention) {
  qkv = register_module("qkv", torch::nn::Linear(config.n_embd, 3 * config.n_embd));
  proj = register_module("proj", torch::nn::Linear(config.n_embd, config.n_embd));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / n_head_;
  std::vector<torch::Tensor> parts = linear(qkv, x).split(C, /*dim=*/2);  // 3 x [B, T, C]
  auto heads = [&](const torch::Tensor& t) {  // [B, T, C] -> [B, nh, T, hs]
    return t.view({B, T, n_head_, hs}).transpose(1, 2);
  };
  CausalAttentionOptions options;
  options.kernel = attention_;
  options.fused_softmax = fused_softmax_;
  options.dropout = dropout_;
  options.training = is_training();
  torch::Tensor y = causal_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]),
                                     options);         // [B, nh, T, hs]
  y = y.transpose(1, 2).contiguous().view({B, T, C});  // heads side by side again
  return maybe_dropout(linear(proj, y), dropout_, is_training());
}

torch::Tensor CausalSelfAttentionImpl::forward_cached(const torch::Tensor& x, torch::Tensor& keys,
                                                      torch::Tensor& values, int64_t past) {
  const int64_t B = x.size(0), t = x.size(1), C = x.size(2), hs = C / n_head_;
  const int64_t T = past + t;
  std::vector<torch::Tensor> parts = linear(qkv, x).split(C, /*dim=*/2);  // 3 x [B, t, C]
  auto heads = [&](const torch::Tensor& p) {  // [B, t, C] -> [B, nh, t, hs]
    return p.view({B, t, n_head_, hs}).transpose(1, 2);
  };
  keys.narrow(2, past, t).copy_(heads(parts[1]));
  values.narrow(2, past, t).copy_(heads(parts[2]));
  const torch::Tensor k = keys.narrow(2, 0, T), v = values.narrow(2, 0, T);  // [B, nh, T, hs]
  const double scale = 1.0 / std::sqrt(double(hs));
  torch::Tensor scores =
      widened_matmul(heads(parts[0]), k.transpose(2, 3)).to(torch::kFloat32) * scale;
  // Row i is position past + i and sees keys 0..past + i: -inf above diagonal past + 1. One
  // new position (each step of generation) sees them all: no mask to build.
  if (t > 1) {
    scores += torch::full({t, T}, -std::numeric_limits<double>::infinity(), torch::kFloat32)
                  .triu(past + 1);
  }
  const torch::Tensor att = torch::softmax(scores, -1).to(x.scalar_type());  // [B, nh, t, T]
  torch::Tensor y = widened_matmul(att, v);                                  // [B, nh, t, hs]
  y = y.transpose(1, 2).contiguous().view({B, t, C});
  return linear(proj, y);
}

GptBlockImpl::GptBlockImpl(const GptConfig& config)
    : dropout_(config.dropout),
      fused_layer_norm_(config.fused_layer_norm),
      fused_gelu_(config.fused_gelu) {
  ln_1 = register_module("ln_1", layer_norm(config.n_embd));
  attn = register_module("attn", CausalSelfAttention(config));
  ln_2 = register_module("ln_2", layer_norm(config.n_embd));
  fc = register_module("fc", torch::nn::Linear(config.n_embd, 4 * config.n_embd));
  mlp_proj = register_module("mlp_proj", torch::nn::Linear(4 * config.n_embd, config.n_embd));
}

torch::Tensor GptBlockImpl::forward(torch::Tensor x) {
  x = x + attn(norm(ln_1, x, fused_layer_norm_));
  const torch::Tensor h = gelu(linear(fc, norm(ln_2, x, fused_layer_norm_)), fused_gelu_);
  return x + maybe_dropout(linear(mlp_proj, h), dropout_, is_training());
}

torch::Tensor GptBlockImpl::forward_cached(torch::Tensor x, torch::Tensor& keys,
                                           torch::Tensor& values, int64_t past) {
  x = x + attn->forward_cached(norm(ln_1, x, fused_layer_norm_), keys, values, past);
  const torch::Tensor h = gelu(linear(fc, norm(ln_2, x, fused_layer_norm_)), fused_gelu_);
  return x + linear(mlp_proj, h);
}

GptImpl::GptImpl(const GptConfig& config, GptInit init) : config_(config) {
  validate(config_);
  // Drawn before any submodule exists, so eager and deferred models take the same seed.
  init_seed_ = static_cast<uint64_t>(
      torch::randint(std::numeric_limits<int64_t>::max(), {1}, torch::kInt64).item<int64_t>());
  const bool deferred = init == GptInit::kDeferred;
  // Each child's values are dropped as soon as it exists: one block in memory at a time.
  auto keep = [deferred](torch::nn::Module& m) {
    if (deferred) unit::defer_parameters(m);
  };
  wte = register_module("wte", torch::nn::Embedding(config.vocab_size, config.n_embd));
  keep(*wte);
  wpe = register_module("wpe", torch::nn::Embedding(config.block_size, config.n_embd));
  keep(*wpe);
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t l = 0; l < config.n_layer; ++l) {
    blocks->push_back(GptBlock(config));
    keep(*blocks[l]);
  }
  ln_f = register_module("ln_f", layer_norm(config.n_embd));
  keep(*ln_f);
  if (deferred) return;
  const auto fill = initializer();
  torch::NoGradGuard no_grad;
  for (auto& item : named_parameters()) fill(item.key(), item.value());
}

std::map<std::string, GptImpl::ParamStart> GptImpl::plan_init() const {
  const double resid_std = kInitStd / std::sqrt(2.0 * double(config_.n_layer));
  std::map<std::string, ParamStart> plan;
  uint64_t index = 0;
  auto add = [&](const std::string& name, double std, double fill) {
    plan[name] = ParamStart{index++, std, fill};
  };
  add("wte.weight", kInitStd, 0.0);
  add("wpe.weight", kInitStd, 0.0);
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    for (const char* ln : {"ln_1.", "ln_2."}) {
      add(b + ln + "weight", 0.0, 1.0);
      add(b + ln + "bias", 0.0, 0.0);
    }
    for (const char* linear : {"attn.qkv.", "attn.proj.", "fc.", "mlp_proj."}) {
      const bool residual =
          std::string(linear) == "attn.proj." || std::string(linear) == "mlp_proj.";
      add(b + linear + "weight", residual ? resid_std : kInitStd, 0.0);
      add(b + linear + "bias", 0.0, 0.0);
    }
  }
  add("ln_f.weight", 0.0, 1.0);
  add("ln_f.bias", 0.0, 0.0);
  return plan;
}

unit::ParamInit GptImpl::initializer() const {
  auto plan = std::make_shared<const std::map<std::string, ParamStart>>(plan_init());
  const uint64_t seed = init_seed_;
  return [plan, seed](const std::string& name, torch::Tensor values) {
    const auto it = plan->find(name);
    ZOFF_CHECK_ARG(it != plan->end(), "gpt: no parameter named ", name);
    torch::NoGradGuard no_grad;
    const ParamStart& start = it->second;
    if (start.std == 0.0) {
      values.fill_(start.fill);
      return;
    }
    // A generator per parameter: its values do not depend on what was drawn before.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(
        data::SplitMix64(seed ^ (start.stream * 0x9E3779B97F4A7C15ull)).next());
    values.normal_(0.0, start.std, gen);
  };
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
  x = zoff::with_unit(*ln_f, [&] { return norm(ln_f, x, config_.fused_layer_norm); });
  // Tied head: logits = x @ wte^T, read from the registered weight at every call.
  return zoff::with_unit(*wte, [&] { return widened_matmul(x, wte->weight.t()); });  // [B, T, V]
}

torch::Tensor GptImpl::forward_cached(const torch::Tensor& idx, GptKvCache& cache) {
  ZOFF_CHECK_ARG(idx.dim() == 2 && idx.scalar_type() == torch::kInt64,
                 "gpt: input must be int64 [B, T], got ", idx.sizes(), " ", idx.scalar_type());
  ZOFF_CHECK_ARG(cache.blocks() == blocks->size() && cache.capacity() == config_.block_size &&
                     cache.batch() == idx.size(0),
                 "gpt: the kv cache (", cache.blocks(), " blocks, context ", cache.capacity(),
                 ", batch ", cache.batch(), ") was not made for this model and batch ",
                 idx.size(0));
  const int64_t past = cache.length(), t = idx.size(1);
  ZOFF_CHECK_ARG(t >= 1 && past + t <= config_.block_size, "gpt: ", t, " tokens after the cache's ",
                 past, " pass block_size = ", config_.block_size);
  const torch::Tensor pos = torch::arange(past, past + t, idx.options());     // [t]
  const torch::Tensor tok = zoff::with_unit(*wte, [&] { return wte(idx); });  // [B, t, C]
  torch::Tensor x = tok + zoff::with_unit(*wpe, [&] { return wpe(pos); });
  for (size_t l = 0; l < blocks->size(); ++l) {
    const auto block = blocks[l];
    x = zoff::with_unit(*block, [&] {
      return block->as<GptBlockImpl>()->forward_cached(x, cache.keys(l), cache.values(l), past);
    });
  }
  cache.advance(t);
  x = zoff::with_unit(*ln_f, [&] { return norm(ln_f, x, config_.fused_layer_norm); });
  return zoff::with_unit(*wte, [&] { return widened_matmul(x, wte->weight.t()); });  // [B, t, V]
}

torch::Tensor gpt_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  const int64_t V = logits.size(-1);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, V}).to(torch::kFloat32),
                                              targets.reshape({-1}));
}

}  // namespace zoff::models
