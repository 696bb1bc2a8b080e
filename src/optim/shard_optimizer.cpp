// make_shard_optimizer: validates the hyper-parameters and picks the backend.
#include "zoff/optim/shard_optimizer.h"

#include <cmath>
#include <vector>

#include "shard_optimizer_backends.h"
#include "zoff/core/error.h"

namespace zoff::optim {
namespace detail {
namespace {

void check_finite(double value, const char* key) {
  ZOFF_CHECK_ARG(std::isfinite(value), "optimizer: ", key, " = ", value, ": must be finite");
}

void check_beta(double value, const char* key) {
  check_finite(value, key);
  ZOFF_CHECK_ARG(value >= 0.0 && value < 1.0, "optimizer: ", key, " = ", value,
                 ": must be in [0, 1)");
}

void check_non_negative(double value, const char* key) {
  check_finite(value, key);
  ZOFF_CHECK_ARG(value >= 0.0, "optimizer: ", key, " = ", value, ": must be >= 0");
}

}  // namespace

void validate_options(const OptimizerOptions& o) {
  const bool adam_like = o.type == "adamw" || o.type == "adam";
  ZOFF_CHECK_ARG(adam_like || o.type == "sgd" || o.type == "adagrad", "optimizer: type = '", o.type,
                 "': must be adamw, adam, sgd or adagrad");
  const StateDtype state_dtype = parse_state_dtype(o.state_dtype);
  ZOFF_CHECK_ARG(state_dtype == StateDtype::kFp32 || adam_like, "optimizer: state_dtype = '",
                 o.state_dtype, "': compressed states are for adam and adamw only (type = '",
                 o.type, "')");
  check_non_negative(o.lr, "lr");
  check_non_negative(o.weight_decay, "weight_decay");
  if (adam_like) {
    check_beta(o.beta1, "beta1");
    check_beta(o.beta2, "beta2");
  }
  if (adam_like || o.type == "adagrad") {
    check_finite(o.eps, "eps");
    ZOFF_CHECK_ARG(o.eps > 0.0, "optimizer: eps = ", o.eps, ": must be > 0");
  }
  if (o.type == "sgd") {
    check_non_negative(o.momentum, "momentum");
    check_finite(o.dampening, "dampening");
    ZOFF_CHECK_ARG(o.dampening >= 0.0 && o.dampening <= 1.0, "optimizer: dampening = ", o.dampening,
                   ": must be in [0, 1]");
    ZOFF_CHECK_ARG(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
                   "optimizer: nesterov = true needs momentum > 0 and dampening = 0 (momentum = ",
                   o.momentum, ", dampening = ", o.dampening, ")");
  }
  if (o.type == "adagrad") {
    check_non_negative(o.lr_decay, "lr_decay");
    check_non_negative(o.initial_accumulator_value, "initial_accumulator_value");
  }
}

void check_step_arguments(const float* params, const float* grads, double lr, CopyOut copy_out,
                          const uint16_t* out16, size_t numel) {
  ZOFF_CHECK_ARG(std::isfinite(lr) && lr >= 0.0, "optimizer step: lr = ", lr,
                 ": must be finite and >= 0");
  if (numel == 0) return;
  ZOFF_CHECK_ARG(params != nullptr, "optimizer step: params is null for ", numel, " elements");
  ZOFF_CHECK_ARG(grads != nullptr, "optimizer step: grads is null for ", numel, " elements");
  ZOFF_CHECK_ARG(copy_out == CopyOut::kNone || out16 != nullptr,
                 "optimizer step: out16 is null but a 16-bit copy-out was asked for");
}

void check_scattered_out(const CopyOutPieces& out, size_t numel) {
  ZOFF_CHECK_ARG(out.numel() == numel, "optimizer step: the scattered copy-out has ", out.numel(),
                 " elements, the optimizer ", numel);
}

}  // namespace detail

int optimizer_state_count(const OptimizerOptions& o) {
  if (o.type == "adam" || o.type == "adamw") return 2;
  if (o.type == "sgd") return o.momentum != 0.0 ? 1 : 0;
  return 1;  // adagrad
}

void ShardOptimizer::step_scattered(float* params, const float* grads, double lr, CopyOut copy_out,
                                    const CopyOutPieces& out) {
  detail::check_scattered_out(out, numel());
  if (copy_out == CopyOut::kNone) return step(params, grads, lr, copy_out, nullptr);
  std::vector<uint16_t> copy(numel());
  step(params, grads, lr, copy_out, copy.data());
  out.scatter(0, copy.size(), copy.data());
}

size_t ShardOptimizer::step_split(uint16_t*, uint16_t*, const float*, double) {
  throw UsageError("optimizer " + name() + ": the split master needs the fused backend");
}

size_t ShardOptimizer::step_split_scattered(const CopyOutPieces&, uint16_t*, const float*, double) {
  throw UsageError("optimizer " + name() + ": the split master needs the fused backend");
}

std::map<std::string, StoredState> ShardOptimizer::stored_state_buffers() {
  std::map<std::string, StoredState> stored;
  for (auto& [name, ptr] : state_buffers()) {
    stored[name] = {StateDtype::kFp32, ptr, numel() * sizeof(float), nullptr, 0};
  }
  return stored;
}

std::unique_ptr<ShardOptimizer> make_shard_optimizer(const OptimizerOptions& options, size_t numel,
                                                     OptimizerBackend backend, int threads,
                                                     size_t segment_numel,
                                                     const StateMemory& memory) {
  detail::validate_options(options);
  ZOFF_CHECK_ARG(threads >= 1, "optimizer: threads = ", threads, ": must be >= 1");
  if (backend == OptimizerBackend::kTorch) {
    ZOFF_CHECK_ARG(options.state_dtype == "fp32", "optimizer: state_dtype = '", options.state_dtype,
                   "' needs the fused backend (the torch backend keeps LibTorch's fp32 states)");
    return detail::make_torch_shard_optimizer(options, numel, threads);
  }
  return detail::make_fused_shard_optimizer(options, numel, threads, segment_numel, memory);
}

}  // namespace zoff::optim
