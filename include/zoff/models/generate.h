// Text generation from a byte-level GPT: sample a continuation of a prompt.
#pragma once

#include <cstdint>
#include <string>

#include "zoff/models/gpt.h"

namespace zoff::models {

// Returns the max_new_tokens bytes generated after `prompt` (the prompt is not repeated).
// Each step feeds the last block_size bytes of prompt + generated text (the context is
// cropped), takes the last position's logits and picks the next byte:
//   temperature == 0: the arg-max byte (greedy; lowest byte on ties);
//   temperature > 0: samples softmax(logits / temperature) restricted to the top_k largest
//   logits (top_k == 0 or >= vocab: no restriction), with a SplitMix64 stream seeded by
//   `seed`, independent of LibTorch's global RNG. Same model, arguments and seed -> same text.
// Runs in eval mode without autograd and restores the module's training flag afterwards.
// An empty prompt, max_new_tokens < 0, a negative or non-finite temperature or top_k < 0 is
// a zoff::UsageError naming the value.
// Most bytes generate() is asked for at once (zoff generate --tokens, zoff train --sample-tokens).
inline constexpr int64_t kMaxGenerateTokens = 1 << 20;

std::string generate(Gpt& model, const std::string& prompt, int64_t max_new_tokens,
                     double temperature, int64_t top_k, uint64_t seed);

}  // namespace zoff::models
