// StreamedWeights: parameters valued on entry to their unit and dropped on exit.
#include "zoff/unit/streamed_weights.h"

#include <algorithm>
#include <utility>

#include "zoff/core/error.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace zoff::unit {

StreamedWeights::StreamedWeights(torch::nn::Module& root, ParamInit init, bool read_ahead)
    : root_(root), init_(std::move(init)), read_ahead_(read_ahead) {
  ZOFF_CHECK(static_cast<bool>(init_), "StreamedWeights: no parameter values (init is empty)");
  for (const auto& item : root.named_parameters(/*recurse=*/true)) {
    if (!is_deferred(item.value())) continue;  // kept whole: frozen, tiny, or already valued
    // A tied tensor registered twice keeps its first name (the one its file stores).
    params_.emplace(item.value().unsafeGetTensorImpl(),
                    Param{item.key(), item.value(), 0, torch::Tensor(), torch::Tensor()});
  }
  install_hooks(root, this);
}

StreamedWeights::~StreamedWeights() {
  if (reading_.valid()) {
    try {
      reading_.get();
    } catch (...) {
      // A failed read ahead of a unit that will never be entered now: nothing to report.
    }
  }
  remove_hooks(root_);
}

std::vector<StreamedWeights::Param*> StreamedWeights::params_of(const torch::nn::Module& module) {
  std::vector<Param*> out;
  for (const auto& p : module.parameters(/*recurse=*/true)) {
    auto it = params_.find(p.unsafeGetTensorImpl());
    if (it != params_.end() && std::find(out.begin(), out.end(), &it->second) == out.end()) {
      out.push_back(&it->second);
    }
  }
  return out;
}

void StreamedWeights::before_forward(const torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  finish_reading();
  if (current_ != nullptr) next_[{before_, current_}] = &module;
  before_ = current_;
  current_ = &module;
  int64_t unit_bytes = 0;
  for (Param* p : params_of(module)) {
    unit_bytes += static_cast<int64_t>(p->tensor.nbytes());
    if (p->open++ > 0) continue;
    if (p->ahead.defined()) {  // counted in live_ and read_ when its read began
      p->values = std::exchange(p->ahead, torch::Tensor());
      p->tensor.set_data(p->values);
      ++hits_;
      continue;
    }
    p->values = buffer_for(*p);
    init_(p->name, p->values);
    p->tensor.set_data(p->values);
    const int64_t bytes = static_cast<int64_t>(p->values.nbytes());
    live_ += bytes;
    read_ += bytes;
  }
  largest_unit_ = std::max(largest_unit_, unit_bytes);
  peak_ = std::max(peak_, live_ + spare_bytes_);
  if (read_ahead_) read_ahead_after(module);
}

// Starts reading the unit that followed `module` (after the same predecessor) last time.
void StreamedWeights::read_ahead_after(const torch::nn::Module& module) {
  drop_unused_ahead();
  const auto it = next_.find({before_, &module});
  if (it == next_.end()) return;
  struct Job {
    Param* param;
    torch::Tensor values;  // taken here: the spare buffers are the compute thread's
  };
  std::vector<Job> jobs;
  for (Param* p : params_of(*it->second)) {
    if (p->open > 0) continue;  // in use now (shared with this unit): valued already
    jobs.push_back({p, buffer_for(*p)});
    being_read_.push_back(p);
    // Counted now: from here the reader thread holds these bytes beside this unit's.
    const int64_t bytes = static_cast<int64_t>(p->tensor.nbytes());
    live_ += bytes;
    read_ += bytes;
  }
  peak_ = std::max(peak_, live_ + spare_bytes_);
  if (jobs.empty()) return;
  reading_ = std::async(std::launch::async, [this, jobs = std::move(jobs)]() mutable {
    for (Job& job : jobs) {
      init_(job.param->name, job.values);
      job.param->ahead = std::move(job.values);
    }
  });
}

// Waits for the reader thread; its values stay in `ahead` until their unit is entered.
void StreamedWeights::finish_reading() {
  if (!reading_.valid()) return;
  if (reading_.wait_for(kReadAheadTimeout) != std::future_status::ready) {
    throw Error("streamed weights: reading " + being_read_.front()->name + " and the rest of " +
                "its unit ahead took over " + std::to_string(kReadAheadTimeout.count()) + " s");
  }
  try {
    reading_.get();
  } catch (...) {
    drop_unused_ahead();
    throw;
  }
}

// Values read ahead for a unit that was not entered next (the order changed) are dropped.
void StreamedWeights::drop_unused_ahead() {
  for (Param* p : being_read_) {
    if (p->ahead.defined() || p->open == 0) {
      live_ -= static_cast<int64_t>(p->tensor.nbytes());
      if (p->ahead.defined()) recycle(std::exchange(p->ahead, torch::Tensor()));
      ++misses_;
    }
  }
  being_read_.clear();
}

void StreamedWeights::after_forward(const torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  bool dropped = false;
  for (Param* p : params_of(module)) {
    if (p->open == 0 || --p->open > 0) continue;
    live_ -= static_cast<int64_t>(p->tensor.nbytes());
    p->tensor.set_data(placeholder(p->tensor.sizes(), p->tensor.options()));
    dropped = !recycle(std::exchange(p->values, torch::Tensor())) || dropped;
  }
#if defined(__GLIBC__)
  if (dropped) malloc_trim(0);  // give the unit's pages back now (see defer_parameters)
#endif
}

// A spare buffer of p's elements and dtype shaped like p, else a new one.
torch::Tensor StreamedWeights::buffer_for(const Param& p) {
  const auto options = p.tensor.options().requires_grad(false);
  auto it = spare_.find({p.tensor.numel(), options.dtype().toScalarType()});
  if (it == spare_.end() || it->second.empty()) return torch::empty(p.tensor.sizes(), options);
  torch::Tensor flat = std::move(it->second.back());
  it->second.pop_back();
  spare_bytes_ -= static_cast<int64_t>(flat.nbytes());
  return flat.view(p.tensor.sizes());
}

// Keeps `values` as a spare when nothing else holds its memory and there is room; returns
// whether it was kept (else it is freed).
bool StreamedWeights::recycle(torch::Tensor values) {
  if (!values.defined()) return false;
  const auto bytes = static_cast<int64_t>(values.nbytes());
  if (values.storage().use_count() != 1 || spare_bytes_ + bytes > largest_unit_) return false;
  spare_[{values.numel(), values.scalar_type()}].push_back(values.reshape({-1}));
  spare_bytes_ += bytes;
  return true;
}

void StreamedWeights::before_backward(const torch::nn::Module& /*module*/) {
  throw Error("streamed weights are for inference: backward through a streamed unit");
}

}  // namespace zoff::unit
