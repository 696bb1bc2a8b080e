// Which kernel computes a GPT's causal attention: the names users pass and the context from
// which the automatic choice streams it. Torch-free, so configs and estimators can name it.
#pragma once

#include <cstdint>
#include <string>

#include "zoff/core/error.h"

namespace zoff::models {

enum class AttentionKernel {
  // kFlash for bf16 CPU activations of at least kFlashMinContext tokens where the CPU
  // multiplies bf16 natively (models::flash_attention_applies), else kMaterialized.
  kAuto,
  // Scores [B nh, T, T], causal softmax (zoff's fused kernel for bf16), then the product
  // with v: every weight is kept for backward (B nh T^2 elements per block).
  kMaterialized,
  // PyTorch's fused scaled_dot_product_attention (is_causal): tiles of queries against
  // tiles of keys with a running softmax, masked tiles skipped, only the output and one
  // log-sum-exp per row kept; backward recomputes the weights a tile at a time.
  kFlash,
};

// Shortest window kAuto streams: where flash stops costing time. `zoff train`, bf16, one
// thread, AMX Xeon, 2026-12-08 (docs/figures.md): gpt medium (T = 1024, batch 2, 14 heads)
// materialized ~3.65 s per step against flash ~4.0 (PyTorch's fused backward recomputes the
// weights: 102 ms per layer against 48), flash 0.78 GiB lighter; gpt xl's width with 4
// blocks, batch 1, T = 1024: 3.03 s against 3.21; T = 2048: ~6.0 s both ways, flash 1.4 GiB
// lighter (the weights, B nh T^2, grow with the square of the window).
inline constexpr int64_t kFlashMinContext = 2048;

inline AttentionKernel parse_attention_kernel(const std::string& name) {
  if (name == "auto") return AttentionKernel::kAuto;
  if (name == "materialized") return AttentionKernel::kMaterialized;
  if (name == "flash") return AttentionKernel::kFlash;
  throw UsageError(
      zoff::detail::concat("attention kernel '", name, "': expected auto, materialized or flash"));
}

inline const char* attention_kernel_name(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::kAuto:
      return "auto";
    case AttentionKernel::kMaterialized:
      return "materialized";
    case AttentionKernel::kFlash:
      return "flash";
  }
  return "auto";
}

}  // namespace zoff::models
