// GptKvCache: one key and one value tensor per block, sized for the whole context.
#include "zoff/models/gpt_kv_cache.h"

#include "zoff/core/error.h"

namespace zoff::models {

GptKvCache::GptKvCache(const GptConfig& config, int64_t batch, const torch::TensorOptions& options)
    : batch_(batch), capacity_(config.block_size) {
  validate(config);
  ZOFF_CHECK_ARG(batch >= 1, "gpt kv cache: batch = ", batch, ": must be >= 1");
  const int64_t head = config.n_embd / config.n_head;
  const auto opts = options.requires_grad(false);
  for (int64_t l = 0; l < config.n_layer; ++l) {
    keys_.push_back(torch::empty({batch, config.n_head, capacity_, head}, opts));
    values_.push_back(torch::empty({batch, config.n_head, capacity_, head}, opts));
  }
}

void GptKvCache::advance(int64_t tokens) {
  ZOFF_CHECK(tokens >= 0 && length_ + tokens <= capacity_, "gpt kv cache: ", length_, " + ", tokens,
             " positions exceed its ", capacity_);
  length_ += tokens;
}

}  // namespace zoff::models
