// The reference backend of ShardOptimizer: LibTorch's own optimizers on views of the shard.
//
// State is created eagerly at construction (exactly what LibTorch creates lazily on the first
// step: zeros, or initial_accumulator_value for Adagrad), so state_buffers() is valid at once
// and its pointers alias LibTorch's state tensors for the optimizer's lifetime. LibTorch's SGD
// initialises the momentum buffer to the first step's update instead of decaying it; with an
// eager buffer that first step is run as buf = 0 * momentum + 1 * d (the buffer zeroed and
// dampening 0 for that step only), which is the same value.
//
// `threads` is not applied here: LibTorch's intra-op pool is process-wide; callers set it
// with torch::set_num_threads.
#include <torch/optim.h>
#include <torch/torch.h>

#include <cstring>
#include <type_traits>
#include <utility>

#include "shard_optimizer_backends.h"
#include "zoff/core/error.h"
#include "zoff/optim/torch_optimizer.h"

namespace zoff::optim::detail {
namespace {

// Installs Adam's or AdamW's state for `key`'s n elements, as LibTorch creates it on the
// first step; returns its exp_avg and exp_avg_sq.
// The key of torch::optim's per-parameter state: the parameter's TensorImpl* (2.x).
using StateKey = std::remove_cvref_t<
    decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

template <class State>
std::vector<torch::Tensor> install_adam_state(torch::optim::Optimizer& optimizer,
                                              StateKey key, int64_t n) {
  auto state = std::make_unique<State>();
  state->step(0);
  state->exp_avg(torch::zeros({n}));
  state->exp_avg_sq(torch::zeros({n}));
  std::vector<torch::Tensor> tensors{state->exp_avg(), state->exp_avg_sq()};
  optimizer.state()[key] = std::move(state);
  return tensors;
}

class TorchShardOptimizer final : public ShardOptimizer {
 public:
  TorchShardOptimizer(const OptimizerOptions& o, size_t numel, int threads)
      : options_(o), numel_(numel) {
    torch::NoGradGuard no_grad;
    const auto n = static_cast<int64_t>(numel);
    // A placeholder with the shard's shape, so LibTorch can size its state; each step
    // re-points its storage at the caller's params (set_ keeps the TensorImpl, which is
    // the key of the optimizer's state).
    param_ = torch::zeros({n}, torch::kFloat32);
    std::vector<torch::Tensor> params{param_};
    key_ = param_.unsafeGetTensorImpl();
    optimizer_ = make_torch_optimizer(params, o);
    auto& state = optimizer_->state();
    if (o.type == "adamw" || o.type == "adam") {
      names_ = {"exp_avg", "exp_avg_sq"};
      tensors_ = o.type == "adamw"
                     ? install_adam_state<torch::optim::AdamWParamState>(*optimizer_, key_, n)
                     : install_adam_state<torch::optim::AdamParamState>(*optimizer_, key_, n);
    } else if (o.type == "sgd") {
      if (o.momentum != 0.0) {
        auto buffer = std::make_unique<torch::optim::SGDParamState>();
        buffer->momentum_buffer(torch::zeros({n}));
        names_ = {"momentum_buffer"};
        tensors_ = {buffer->momentum_buffer()};
        state[key_] = std::move(buffer);
      }
    } else {
      // LibTorch's Adagrad creates its state (sum = initial_accumulator_value) itself.
      names_ = {"sum"};
      tensors_ = {static_cast<torch::optim::AdagradParamState&>(*state.at(key_)).sum()};
    }
    param_.set_();  // drop the placeholder storage until the first step
  }

  void step(float* params, const float* grads, double lr, CopyOut copy_out,
            uint16_t* out16) override {
    check_step_arguments(params, grads, lr, copy_out, out16, numel_);
    torch::NoGradGuard no_grad;
    const auto n = static_cast<int64_t>(numel_);
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
    static float empty_span = 0.0f;  // from_blob wants a pointer even for 0 elements
    param_.set_(torch::from_blob(numel_ == 0 ? &empty_span : params, {n}, f32));
    param_.mutable_grad() =
        torch::from_blob(numel_ == 0 ? &empty_span : const_cast<float*>(grads), {n}, f32);
    auto& group = optimizer_->param_groups().at(0);
    group.options().set_lr(lr);

    const bool sgd_first_step = options_.type == "sgd" && options_.momentum != 0.0 && step_ == 0;
    if (sgd_first_step) {
      tensors_[0].zero_();
      static_cast<torch::optim::SGDOptions&>(group.options()).dampening(0.0);
    }
    std::string failure;
    try {
      optimizer_->step();
    } catch (const c10::Error& e) {
      failure = e.what_without_backtrace();
    }
    if (sgd_first_step) {
      static_cast<torch::optim::SGDOptions&>(group.options()).dampening(options_.dampening);
    }
    param_.mutable_grad() = torch::Tensor();  // do not keep a view of the caller's grads
    if (!failure.empty()) {
      param_.set_();
      throw Error("torch optimizer step failed: " + failure);
    }
    ++step_;

    if (copy_out != CopyOut::kNone && numel_ > 0) {
      const auto dtype = copy_out == CopyOut::kBf16 ? torch::kBFloat16 : torch::kHalf;
      const auto converted = param_.to(dtype).contiguous();
      std::memcpy(out16, converted.data_ptr(), numel_ * sizeof(uint16_t));
    }
    param_.set_();  // nor of the caller's params
  }

  size_t numel() const override { return numel_; }
  int64_t step_count() const override { return step_; }

  size_t state_bytes() const override {
    size_t bytes = 0;
    for (const auto& t : tensors_) bytes += t.nbytes();
    return bytes;
  }

  std::map<std::string, float*> state_buffers() override {
    std::map<std::string, float*> buffers;
    for (size_t i = 0; i < names_.size(); ++i) buffers[names_[i]] = tensors_[i].data_ptr<float>();
    return buffers;
  }

  void set_step_count(int64_t step) override {
    ZOFF_CHECK_ARG(step >= 0 && step <= kMaxStepCount, "optimizer: step count = ", step,
                   ": must be in [0, 2^53]");
    step_ = step;
    // LibTorch keeps its own count (bias correction, Adagrad's lr decay): keep it in step.
    auto it = optimizer_->state().find(key_);
    if (it == optimizer_->state().end()) return;
    if (options_.type == "adamw") {
      static_cast<torch::optim::AdamWParamState&>(*it->second).step(step);
    } else if (options_.type == "adam") {
      static_cast<torch::optim::AdamParamState&>(*it->second).step(step);
    } else if (options_.type == "adagrad") {
      static_cast<torch::optim::AdagradParamState&>(*it->second).step(step);
    }
  }

  std::string name() const override { return options_.type + " (torch)"; }

 private:
  OptimizerOptions options_;
  size_t numel_;
  torch::Tensor param_;  // 1-D view of the caller's params during step()
  StateKey key_{};       // the optimizer's state key of param_
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> tensors_;  // LibTorch's own state tensors, names_ order
  int64_t step_ = 0;
};

}  // namespace

std::unique_ptr<ShardOptimizer> make_torch_shard_optimizer(const OptimizerOptions& options,
                                                           size_t numel, int threads) {
  return std::make_unique<TorchShardOptimizer>(options, numel, threads);
}

}  // namespace zoff::optim::detail
