// A small persistent pool of std::threads that runs one task on every thread, and the
// cache-line-aligned split of a span among them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace zoff::optim {

class ThreadPool {
 public:
  // `threads` >= 1 threads in all: the caller of run() plus threads - 1 workers started now.
  // Throws zoff::UsageError naming `threads` when it is out of [1, kMaxThreads].
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  static constexpr int kMaxThreads = 256;
  // How long run() waits for the workers before it gives up with zoff::Error. A step over a
  // billion floats takes about a second, so this only fires on a real hang. After a timeout
  // the pool must not be used again (a worker may still be inside the task).
  static constexpr std::chrono::seconds kRunTimeout{600};
  // How long a worker that finished a task, and the caller waiting for the workers, poll
  // before they sleep on a condition variable. Waking a sleeping thread costs tens of
  // microseconds here (a futex round trip through the VM's scheduler), as much as a whole
  // step over a 1M-element sub-group; back-to-back runs find the workers still polling.
  // Bounded, so an idle pool costs at most this much CPU per run.
  static constexpr std::chrono::microseconds kSpin{50};

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs task(i) for i in [0, size()), i = 0 on the calling thread, and returns when all have
  // returned. The first exception thrown by any of them is rethrown here.
  void run(const std::function<void(int)>& task);

 private:
  void worker_loop(int index);
  // Polls until generation_ moves past `seen` or the pool stops, for at most kSpin; true
  // if it did.
  bool spin_for_work(uint64_t seen) const;
  // Polls until pending_ is 0, for at most kSpin; true if it is.
  bool spin_for_workers() const;

  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // one run() at a time
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int)>* task_ = nullptr;  // written before generation_ moves
  // Changed under mutex_ (so a sleeping worker's predicate cannot miss it), read without it
  // by polling threads.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // workers still inside the current task
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
};

// Bytes per cache line, and floats per cache line: the grain of the split.
constexpr size_t kCacheLineBytes = 64;
constexpr size_t kFloatsPerCacheLine = kCacheLineBytes / sizeof(float);

// Splits [0, n) into `parts` contiguous ranges, returned as parts + 1 boundaries (first 0,
// last n). Inner boundaries are `first_aligned` plus a multiple of 16 floats (64 bytes), so
// when element `first_aligned` starts a cache line no two ranges touch the same line.
// Ranges are as equal as that allows; none is smaller than `min_part` unless it is empty
// (small spans use fewer threads, the rest get empty ranges).
std::vector<size_t> split_on_cache_lines(size_t n, int parts, size_t first_aligned,
                                         size_t min_part);

// Index of the first element of `data` whose address is a multiple of 64 bytes (0..15;
// 0 too when data is not even float-aligned).
size_t first_cache_line_index(const float* data);

}  // namespace zoff::optim
