// Text generation from a byte-level GPT: sample a continuation of a prompt.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "zoff/models/gpt.h"

namespace zoff::models {

// Most bytes generate() is asked for at once (zoff generate --tokens, zoff train --sample-tokens).
inline constexpr int64_t kMaxGenerateTokens = 1 << 20;

struct GenerateOptions {
  int64_t max_new_tokens = 200;
  // 0: the arg-max byte (greedy; lowest byte on ties); > 0: sample softmax(logits /
  // temperature) among the top_k largest logits (top_k == 0 or >= vocab: all).
  double temperature = 0.8;
  int64_t top_k = 40;
  uint64_t seed = 0;  // SplitMix64 stream, independent of LibTorch's global RNG
  // true: each new byte runs forward for itself alone, attending through a GptKvCache in
  // the model's dtype. When the context is full (block_size positions), the cache is
  // rebuilt from the last block_size / 2 bytes (at least 1), so the model always sees
  // between half and all of its context: one forward of block_size / 2 positions every
  // block_size / 2 bytes. The prompt is cut to its last block_size bytes first.
  // false: every byte runs forward over the last block_size bytes (a sliding window).
  bool kv_cache = true;
  // Called with each byte as soon as it is chosen (zoff generate prints it at once).
  std::function<void(char)> on_token;
};

// Returns the bytes generated after `prompt` (the prompt is not repeated). Runs in eval mode
// without autograd and restores the module's training flag afterwards. Same model,
// options and seed -> same text. An empty prompt, max_new_tokens < 0, a negative or
// non-finite temperature or top_k < 0 is a zoff::UsageError naming the value.
std::string generate(Gpt& model, const std::string& prompt, const GenerateOptions& options);

// generate() with a sliding window (kv_cache false): every byte sees the last block_size bytes.
std::string generate(Gpt& model, const std::string& prompt, int64_t max_new_tokens,
                     double temperature, int64_t top_k, uint64_t seed);

}  // namespace zoff::models
