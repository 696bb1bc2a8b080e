// SerialWorker: one thread that runs submitted jobs in submission order and hands back Work for
// each.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "zoff/dist/comm.h"

namespace zoff::dist {

// Collectives must run in the order they were issued, the same on every rank, so a single
// thread runs them one after another while the caller computes. The first job that throws
// poisons the worker: the peers' protocol state is unknown after a failed collective, so every
// later job fails at once with that first error instead of waiting on a broken exchange.
class SerialWorker {
 public:
  SerialWorker();
  // Fails the jobs not yet started ("<name> shut down") and joins the thread. A job already
  // running is asked to stop through stopping() and finishes first.
  ~SerialWorker();
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  // Queues `job`; the returned Work's wait() rethrows what the job threw.
  WorkPtr submit(std::function<void()> job);

  // True once the destructor started: long waits inside a job check it and give up.
  bool stopping() const;

 private:
  struct Job;
  void run();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  std::exception_ptr poisoned_;  // the first job error; only the worker thread touches it
  std::thread thread_;
};

}  // namespace zoff::dist
