// GradWindow: per-sub-group gradient buffers drawn from a bounded, reused pool.
#include "zoff/engine/grad_window.h"

#include <string>

#include "zoff/core/error.h"

namespace zoff::engine {

namespace {
constexpr size_t kCacheLineAlignment = 64;  // one cache line: the kernels read whole vectors
}

GradWindow::GradWindow(size_t group_elems, size_t max_buffers, std::chrono::milliseconds timeout)
    : group_elems_(group_elems), max_buffers_(max_buffers), timeout_(timeout) {
  ZOFF_CHECK(group_elems_ > 0 && max_buffers_ > 0, "gradient window of ", max_buffers_,
             " buffers of ", group_elems_, " elements");
}

float* GradWindow::acquire(size_t group) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = held_.find(group);
  if (it != held_.end()) return it->second.as<float>();
  const bool room = released_.wait_for(lock, timeout_, [&] { return held_.size() < max_buffers_; });
  ZOFF_CHECK(room, "gradient window: all ", max_buffers_, " sub-group buffers still held after ",
             timeout_.count(), " ms (the optimizer step is not consuming them)");
  offload::HostBuffer buffer;
  if (free_.empty()) {
    buffer = offload::HostBuffer(group_elems_ * sizeof(float), kCacheLineAlignment);
  } else {
    buffer = std::move(free_.back());
    free_.pop_back();
  }
  return held_.emplace(group, std::move(buffer)).first->second.as<float>();
}

const float* GradWindow::find(size_t group) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = held_.find(group);
  return it == held_.end() ? nullptr : it->second.as<float>();
}

void GradWindow::release(size_t group) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = held_.find(group);
    if (it == held_.end()) return;
    free_.push_back(std::move(it->second));
    held_.erase(it);
  }
  released_.notify_all();
}

void GradWindow::release_all() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [group, buffer] : held_) free_.push_back(std::move(buffer));
    held_.clear();
  }
  released_.notify_all();
}

size_t GradWindow::held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return held_.size();
}

}  // namespace zoff::engine
