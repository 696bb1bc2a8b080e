// A user's LibTorch model the engine tests train: BatchNorm, a frozen embedding, a tied weight.
#pragma once

#include <torch/torch.h>

#include "zoff/unit/unit_call.h"

namespace zoff::engine::testing {

constexpr int64_t kVocab = 20;

// x -> a -> tanh -> tied (a's weight, transposed) -> tanh: the same tensor registered twice.
struct TiedDecoderImpl : torch::nn::Module {
  explicit TiedDecoderImpl(torch::Tensor w) { weight = register_parameter("weight", w); }
  torch::Tensor forward(const torch::Tensor& x) { return torch::matmul(x, weight); }  // [B, 8]
  torch::Tensor weight;
};
TORCH_MODULE(TiedDecoder);

// tokens [B] -> frozen embedding [B, 8] -> Linear a [B, 12] -> BatchNorm1d -> tanh
//   -> tied decoder [B, 8] -> tanh -> head [B, 3]
struct UserModelImpl : torch::nn::Module {
  explicit UserModelImpl(bool marked) : marked_(marked) {
    emb = register_module("emb", torch::nn::Embedding(kVocab, 8));
    emb->weight.set_requires_grad(false);
    // No bias before BatchNorm (as usual): BN removes it, so its gradient is rounding noise
    // that Adam would amplify into a different value in every summation order.
    a = register_module("a", torch::nn::Linear(torch::nn::LinearOptions(8, 12).bias(false)));
    bn = register_module("bn", torch::nn::BatchNorm1d(12));
    dec = register_module("dec", TiedDecoder(a->weight));
    head = register_module("head", torch::nn::Linear(8, 3));
  }
  template <typename M>
  torch::Tensor run(M& m, const torch::Tensor& x) {
    return marked_ ? zoff::unit_forward(m, x) : m->forward(x);
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    auto x = emb(tokens).to(a->weight.scalar_type());
    x = torch::tanh(run(bn, run(a, x)));
    x = torch::tanh(run(dec, x));
    return run(head, x);
  }
  torch::nn::Embedding emb{nullptr};
  torch::nn::Linear a{nullptr}, head{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
  TiedDecoder dec{nullptr};
  bool marked_;
};
TORCH_MODULE(UserModel);

inline UserModel make_user_model(bool marked = true, uint64_t seed = 11) {
  torch::manual_seed(seed);
  return UserModel(marked);
}

}  // namespace zoff::engine::testing
