// Shape of a GPT (layers, heads, width, context), its named presets and its exact parameter
// count. Header-only and torch-free so that memory estimators can use it without a model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zoff/core/error.h"
#include "zoff/models/attention_kernel.h"

namespace zoff::models {

struct GptConfig {
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;      // model width C; must be a multiple of n_head
  int64_t block_size = 128;  // longest context, tokens
  int64_t vocab_size = 256;  // byte-level
  double dropout = 0.0;      // attention, residual and MLP dropout; 0 keeps training exact
  // The three fused kernels below are CPU kernels: on a GPU the model takes LibTorch's ops.
  // bf16 activations: LayerNorm through zoff's fused kernel (fused_layer_norm.h) instead of
  // LibTorch's widen / fp32 layer_norm / round; false gives the same ops as a PyTorch GPT.
  bool fused_layer_norm = true;
  // bf16 activations: the MLP's GELU through zoff's fused kernel (fused_gelu.h) instead of
  // LibTorch's gelu; false gives the same ops as a PyTorch GPT.
  bool fused_gelu = true;
  // bf16 activations: attention's scaled, causally masked softmax through zoff's fused kernel
  // (fused_causal_softmax.h) after a plain bmm, instead of baddbmm with a -inf mask and
  // LibTorch's softmax; false gives the same ops as a PyTorch GPT.
  bool fused_softmax = true;
  // Which kernel computes attention (attention_kernel.h): kAuto streams bf16 windows of
  // kFlashMinContext tokens or more through PyTorch's fused attention where the CPU
  // multiplies bf16 natively; kFlash at any length trades time for memory.
  AttentionKernel attention = AttentionKernel::kAuto;
};

// Checks every field; a bad one is a zoff::UsageError naming it.
inline void validate(const GptConfig& c) {
  ZOFF_CHECK_ARG(c.n_layer >= 1, "gpt: n_layer = ", c.n_layer, ": must be >= 1");
  ZOFF_CHECK_ARG(c.n_head >= 1, "gpt: n_head = ", c.n_head, ": must be >= 1");
  ZOFF_CHECK_ARG(c.n_embd >= 1 && c.n_embd % c.n_head == 0, "gpt: n_embd = ", c.n_embd,
                 ": must be a positive multiple of n_head = ", c.n_head);
  ZOFF_CHECK_ARG(c.block_size >= 1, "gpt: block_size = ", c.block_size, ": must be >= 1");
  ZOFF_CHECK_ARG(c.vocab_size >= 1, "gpt: vocab_size = ", c.vocab_size, ": must be >= 1");
  ZOFF_CHECK_ARG(c.dropout >= 0.0 && c.dropout < 1.0, "gpt: dropout = ", c.dropout,
                 ": must be in [0, 1)");
}

inline constexpr const char* kGptPresetNames =
    "tiny, small, medium, large, xl, 1.3b, 2.7b, 6.7b, 13b";
// Longest context --context accepts (tokens); the position table is context x width.
inline constexpr int64_t kMaxGptContext = int64_t{1} << 20;

// Named sizes (parameter counts with the tied byte-level head, see gpt_param_count):
//   tiny   5 layers,  4 heads,  128 wide, context  128:     1,040,768
//   small  8 layers,  6 heads,  384 wide, context  256:    14,393,088
//   medium 12 layers, 14 heads, 896 wide, context 1024:   116,893,952
//   large  28 layers, 16 heads, 1024 wide, context 1024:  354,007,040
//   xl     26 layers, 32 heads, 2048 wide, context 1024: 1,311,940,608  (also "1.3b")
//   2.7b   32 layers, 32 heads, 2560 wide, context 2048: 2,523,550,720
//   6.7b   32 layers, 32 heads, 4096 wide, context 2048: 6,453,600,256
//   13b    40 layers, 40 heads, 5120 wide, context 2048: 12,597,381,120
// (the GPT-3 paper's shapes; a byte-level vocabulary, so fewer parameters than its names).
// An unknown name is a zoff::UsageError listing the valid ones.
inline GptConfig gpt_preset(const std::string& name) {
  auto make = [](int64_t layers, int64_t heads, int64_t width, int64_t context) {
    GptConfig c;
    c.n_layer = layers;
    c.n_head = heads;
    c.n_embd = width;
    c.block_size = context;
    return c;
  };
  if (name == "tiny") return make(5, 4, 128, 128);
  if (name == "small") return make(8, 6, 384, 256);
  if (name == "medium") return make(12, 14, 896, 1024);
  if (name == "large") return make(28, 16, 1024, 1024);
  if (name == "xl" || name == "1.3b") return make(26, 32, 2048, 1024);
  if (name == "2.7b") return make(32, 32, 2560, 2048);
  if (name == "6.7b") return make(32, 32, 4096, 2048);
  if (name == "13b") return make(40, 40, 5120, 2048);
  throw UsageError(
      zoff::detail::concat("gpt: unknown preset '", name, "' (valid: ", kGptPresetNames, ")"));
}

// A preset trained at another context (zoff train --context): `context` tokens instead of
// the preset's (0 keeps it). A context outside [1, kMaxGptContext] is a UsageError.
inline GptConfig gpt_preset(const std::string& name, int64_t context) {
  GptConfig c = gpt_preset(name);
  ZOFF_CHECK_ARG(context >= 0 && context <= kMaxGptContext, "--context ", context,
                 ": must be in [1, ", kMaxGptContext, "] (0 = the preset's)");
  if (context > 0) c.block_size = context;
  return c;
}

// Exact number of parameters (elements) of Gpt(config), without building it:
//   token embedding V*C (shared with the lm head) + position embedding T*C
//   + per block: 2 LayerNorms 4C, qkv 3C*C + 3C, attention proj C*C + C,
//     MLP fc 4C*C + 4C and proj C*4C + C  (= 12C^2 + 13C)
//   + final LayerNorm 2C.
inline int64_t gpt_param_count(const GptConfig& c) {
  const int64_t C = c.n_embd;
  return c.vocab_size * C + c.block_size * C + c.n_layer * (12 * C * C + 13 * C) + 2 * C;
}

// Elements of each stage-3 unit of Gpt(config), in forward order: the token embedding (also
// the head), the position embedding, each block, the final LayerNorm.
inline std::vector<int64_t> gpt_unit_elems(const GptConfig& c) {
  const int64_t C = c.n_embd;
  std::vector<int64_t> units{c.vocab_size * C, c.block_size * C};
  for (int64_t l = 0; l < c.n_layer; ++l) units.push_back(12 * C * C + 13 * C);
  units.push_back(2 * C);
  return units;
}

// Bytes autograd keeps for one training micro-batch of `batch` windows of the full context,
// at its peak in backward, with activations of `elem_bytes` (2 under bf16). From the tensors
// each op of GptBlock saves: the block input, ln_1's output, the qkv output (q, k, v are
// views of it), the attention output, the residual, ln_2's output, fc's output and gelu's
// output (16 BTC), and the attention weights: materialized, the softmax output [B, H, T, T];
// streamed (`flash`, models::flash_attention_applies), the fused kernel's output beside its
// contiguous copy (BTC) and one fp32 log-sum-exp per row and head. With checkpointing, only
// each block's input is kept (BTC) and one block is recomputed at a time, with its
// backward's temporaries (about 4 BTC, and two weight-sized ones when materialized). The
// head adds the logits in the compute dtype and fp32 (log-softmax and its gradient):
// BTV (e + 12).
// The part of it still kept when backward ends: the checkpointed block inputs (L BTC)
// with checkpointing, else nothing (each block's activations go with its backward).
inline int64_t gpt_late_activation_bytes(const GptConfig& c, int64_t batch, int64_t elem_bytes,
                                         bool checkpointing) {
  return checkpointing ? c.n_layer * batch * c.block_size * c.n_embd * elem_bytes : 0;
}

inline int64_t gpt_activation_bytes(const GptConfig& c, int64_t batch, int64_t elem_bytes,
                                    bool checkpointing, bool flash) {
  const int64_t btc = batch * c.block_size * c.n_embd;
  const int64_t bhtt = batch * c.n_head * c.block_size * c.block_size;
  const int64_t bht = batch * c.n_head * c.block_size;
  const int64_t weights = flash ? btc + (bht * 4 + elem_bytes - 1) / elem_bytes : bhtt;
  const int64_t block = 16 * btc + weights;
  const int64_t backward_temps = 4 * btc + (flash ? 0 : 2 * bhtt);
  const int64_t blocks =
      checkpointing ? c.n_layer * btc + block + backward_temps : c.n_layer * block + backward_temps;
  const int64_t embed_and_head = 4 * btc;  // token + position outputs, their sum, ln_f's
  const int64_t logits = batch * c.block_size * c.vocab_size * (elem_bytes + 12);
  return (blocks + embed_and_head) * elem_bytes + logits;
}

}  // namespace zoff::models
