// A byte-level decoder-only transformer (GPT-2 shape): learned positions, pre-LayerNorm
// blocks of causal self-attention and a GELU MLP, final LayerNorm, lm head tied to the
// token embedding.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>

#include "zoff/models/gpt_config.h"
#include "zoff/models/gpt_kv_cache.h"
#include "zoff/unit/deferred_init.h"

namespace zoff::models {

// Multi-head causal self-attention through models::causal_attention (the kernel
// GptConfig::attention names; the Python GPT, examples/python/gpt.py, calls the same function
// through zoff.nn, and the tests match the two bit for bit): x [B, T, C] -> [B, T, C].
// Position t attends to 0..t.
class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);
  // x [B, t, C] at positions past..past+t-1: writes their keys and values into `keys` and
  // `values` ([B, nh, capacity, hs], positions 0..past-1 already there) and attends over
  // positions 0..past+t-1, causally. Scores and softmax in fp32. -> [B, t, C]
  torch::Tensor forward_cached(const torch::Tensor& x, torch::Tensor& keys, torch::Tensor& values,
                               int64_t past);

  torch::nn::Linear qkv{nullptr};   // weight [3C, C]: rows 0..C-1 query, then key, then value
  torch::nn::Linear proj{nullptr};  // weight [C, C]

 private:
  int64_t n_head_;
  double dropout_;
  bool fused_softmax_;
  AttentionKernel attention_;
};
TORCH_MODULE(CausalSelfAttention);

// x + attn(ln_1(x)), then x + mlp(ln_2(x)); mlp = fc [4C, C] -> GELU -> proj [C, 4C].
class GptBlockImpl : public torch::nn::Module {
 public:
  explicit GptBlockImpl(const GptConfig& config);
  torch::Tensor forward(torch::Tensor x);
  // forward() for positions past..past+t-1 with attention through the cache (see
  // CausalSelfAttentionImpl::forward_cached).
  torch::Tensor forward_cached(torch::Tensor x, torch::Tensor& keys, torch::Tensor& values,
                               int64_t past);

  torch::nn::LayerNorm ln_1{nullptr};
  CausalSelfAttention attn{nullptr};
  torch::nn::LayerNorm ln_2{nullptr};
  torch::nn::Linear fc{nullptr};
  torch::nn::Linear mlp_proj{nullptr};

 private:
  double dropout_;
  bool fused_layer_norm_;
  bool fused_gelu_;
};
TORCH_MODULE(GptBlock);

// Parameters are registered once each (the tied head reuses wte's weight in forward and
// registers nothing), so parameters().size() == named_parameters().size() and the total is
// gpt_param_count(config). Nothing is cached outside the registered parameters: replacing
// their storage (set_data to views of a flat buffer, conversion to bf16) is safe.
//
// Initialization: Linear and Embedding weights ~ N(0, 0.02), residual projections
// (attention proj, MLP proj) ~ N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm weight 1
// and bias 0. Each parameter draws from a generator of its own, seeded from one 64-bit
// seed taken from LibTorch's global generator at construction (seed that with
// torch::manual_seed) and the parameter's index: its values do not depend on the order
// parameters are initialized in, so a deferred model valued unit by unit by the engine
// (initializer()) gets bit for bit the values an eager one gets.
enum class GptInit {
  kEager,     // parameters hold their initial values
  kDeferred,  // placeholders without memory (unit::defer_parameters); values: initializer()
};

class GptImpl : public torch::nn::Module {
 public:
  // Validates the config (zoff::UsageError on a bad field). kDeferred builds each block and
  // drops its values at once, so construction holds at most one block's parameters.
  explicit GptImpl(const GptConfig& config, GptInit init = GptInit::kEager);

  // idx int64 [B, T] of tokens in [0, vocab), 1 <= T <= block_size -> logits [B, T, vocab]
  // in the parameters' dtype. A bad shape or T is a zoff::UsageError.
  torch::Tensor forward(const torch::Tensor& idx);
  // Generation: idx int64 [B, t] are the tokens at positions cache.length() ..
  // cache.length() + t - 1 (which must not pass block_size); their keys and values are added
  // to the cache -> logits [B, t, vocab], those forward() gives for the same positions (up
  // to the order of the sums). Runs each block as a unit, as forward() does.
  torch::Tensor forward_cached(const torch::Tensor& idx, GptKvCache& cache);

  const GptConfig& config() const { return config_; }
  // Activation checkpointing: each block's activations are recomputed in backward instead
  // of kept (zoff::activation_checkpoint); less memory, one more forward per block. Off by default.
  void set_activation_checkpointing(bool on) { activation_checkpointing_ = on; }
  bool activation_checkpointing() const { return activation_checkpointing_; }
  // The initial values of a parameter by name (as named_parameters() names it), for
  // EngineOptions::param_init: the same values the eager model starts with. Holds no
  // reference to the module.
  unit::ParamInit initializer() const;

  torch::nn::Embedding wte{nullptr};  // [vocab, C], also the lm head
  torch::nn::Embedding wpe{nullptr};  // [block_size, C]
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};

 private:
  // How one parameter starts: N(0, std) when std > 0, else the constant `fill`.
  struct ParamStart {
    uint64_t stream = 0;  // the parameter's index: its generator's seed with init_seed_
    double std = 0.0;
    double fill = 0.0;
  };
  std::map<std::string, ParamStart> plan_init() const;
  GptConfig config_;
  uint64_t init_seed_ = 0;
  bool activation_checkpointing_ = false;
};
TORCH_MODULE(Gpt);

// Mean next-token cross entropy (computed in fp32) of logits [B, T, V] against targets
// [B, T]: the training loss of the GPT examples.
torch::Tensor gpt_loss(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace zoff::models
