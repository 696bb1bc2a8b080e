// A small persistent pool of std::threads that runs one task on every thread.
#include "zoff/optim/thread_pool.h"

#include <algorithm>

#include "zoff/core/error.h"

namespace zoff::optim {

ThreadPool::ThreadPool(int threads) {
  ZOFF_CHECK_ARG(threads >= 1 && threads <= kMaxThreads, "threads = ", threads, ": must be in [1, ",
                 kMaxThreads, "]");
  workers_.reserve(static_cast<size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    // Idle workers sleep until there is work or the pool closes: not a wait for a result.
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const auto* task = task_;
    lock.unlock();
    std::exception_ptr error;
    try {
      (*task)(index);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    if (--pending_ == 0) done_.notify_one();
  }
}

void ThreadPool::run(const std::function<void(int)>& task) {
  std::lock_guard<std::mutex> run_lock(run_mutex_);
  if (workers_.empty()) {
    task(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &task;
    pending_ = static_cast<int>(workers_.size());
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  std::exception_ptr error;
  try {
    task(0);
  } catch (...) {
    error = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_.wait_for(lock, kRunTimeout, [&] { return pending_ == 0; })) {
    throw Error(detail::concat("thread pool: ", pending_, " of ", workers_.size(),
                               " workers did not finish within ", kRunTimeout.count(), " s"));
  }
  task_ = nullptr;
  if (!error) error = error_;
  if (error) std::rethrow_exception(error);
}

std::vector<size_t> split_on_cache_lines(size_t n, int parts, size_t first_aligned,
                                         size_t min_part) {
  ZOFF_CHECK_ARG(parts >= 1, "parts = ", parts, ": must be >= 1");
  const size_t grain = kFloatsPerCacheLine;
  first_aligned = std::min(first_aligned % grain, n);
  // Whole cache lines after the unaligned head; each part gets a share of them.
  const size_t lines = (n - first_aligned) / grain;
  const size_t wanted = std::max<size_t>(min_part, 1);
  const size_t useful = std::max<size_t>(1, std::min<size_t>(parts, n / wanted));
  std::vector<size_t> bounds(static_cast<size_t>(parts) + 1, n);
  bounds[0] = 0;
  for (size_t k = 1; k < useful; ++k) {
    bounds[k] = first_aligned + (lines * k / useful) * grain;
  }
  return bounds;
}

size_t first_cache_line_index(const float* data) {
  const auto address = reinterpret_cast<uintptr_t>(data);
  if (address % sizeof(float) != 0) return 0;
  const size_t misalignment = address % kCacheLineBytes;
  return misalignment == 0 ? 0 : (kCacheLineBytes - misalignment) / sizeof(float);
}

}  // namespace zoff::optim
