// The keys and values a GPT has computed for the positions it has seen, so that generation
// computes each new token's attention without recomputing the past (a KV cache).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "zoff/models/gpt_config.h"

namespace zoff::models {

// Per block, keys and values [B, n_head, block_size, head size] in the model's compute dtype,
// filled for positions 0..length()-1. Memory: 2 * n_layer * B * block_size * n_embd
// elements (gpt 1.3b, context 1024, bf16: 2 * 24 * 1024 * 2048 * 2 B = 201 MB).
class GptKvCache {
 public:
  // A bad batch is a zoff::UsageError naming it.
  GptKvCache(const GptConfig& config, int64_t batch, const torch::TensorOptions& options);

  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  int64_t batch() const { return batch_; }
  torch::Tensor& keys(size_t block) { return keys_.at(block); }
  torch::Tensor& values(size_t block) { return values_.at(block); }
  size_t blocks() const { return keys_.size(); }
  torch::ScalarType dtype() const { return keys_.front().scalar_type(); }

  // Marks `tokens` more positions as filled (after every block wrote them); forgets all.
  void advance(int64_t tokens);
  void clear() { length_ = 0; }

 private:
  std::vector<torch::Tensor> keys_, values_;
  int64_t batch_ = 0;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
};

}  // namespace zoff::models
