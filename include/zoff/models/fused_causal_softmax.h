// Causal softmax of bf16 attention scores in one pass each way, skipping the masked future.
#pragma once

#include <torch/torch.h>

namespace zoff::models {

// softmax(scale * scores) over the last dimension with the causal mask: scores is bf16,
// [..., T, T] (query i, key j); row i is normalized over keys j <= i and is 0 for j > i.
// The same as adding -inf above the diagonal and calling LibTorch's softmax, but the masked
// half is never read or exponentiated: the prefix is widened to fp32, scaled, normalized
// and rounded once. Backward gives scale * y * (dy - sum(y dy)) over the prefix in fp32,
// rounded once (LibTorch's bf16 softmax backward, then a separate multiply by the scale in
// baddbmm's backward, round three times). Results are within one bf16 ulp of LibTorch's
// and miss the correctly rounded value no more often (see the tests); they do not depend
// on the number of intra-op threads. Differentiable once in scores.
torch::Tensor fused_causal_softmax(const torch::Tensor& scores, double scale);

}  // namespace zoff::models
