// A small persistent pool of std::threads that runs one task on every thread.
#include "zoff/optim/thread_pool.h"

#include <algorithm>

#include "zoff/core/error.h"

namespace zoff::optim {
namespace {

// Calls `done` until it is true or kSpin has passed; the clock is read every 64 polls.
template <class Done>
bool spin_until(const Done& done) {
  const auto until = std::chrono::steady_clock::now() + ThreadPool::kSpin;
  for (;;) {
    for (int k = 0; k < 64; ++k) {
      if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();  // tells the core this is a spin loop (and saves power)
#endif
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

}  // namespace

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

bool ThreadPool::spin_for_work(uint64_t seen) const {
  return spin_until([&] {
    return stop_.load(std::memory_order_acquire) ||
           generation_.load(std::memory_order_acquire) != seen;
  });
}

bool ThreadPool::spin_for_workers() const {
  return spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; });
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    if (!spin_for_work(seen)) {
      // Idle workers sleep until there is work or the pool closes: not a wait for a result.
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    }
    if (stop_) return;
    seen = generation_.load(std::memory_order_acquire);
    const auto* task = task_;
    std::exception_ptr error;
    try {
      (*task)(index);
    } catch (...) {
      error = std::current_exception();
    }
    if (error) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = error;
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Under the lock: the caller may be between its predicate check and its sleep.
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
    }
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
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    error_ = nullptr;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  std::exception_ptr error;
  try {
    task(0);
  } catch (...) {
    error = std::current_exception();
  }
  spin_for_workers();
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_.wait_for(lock, kRunTimeout, [&] { return pending_ == 0; })) {
    throw Error(zoff::detail::concat("thread pool: ", pending_.load(), " of ", workers_.size(),
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
