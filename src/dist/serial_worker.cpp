// SerialWorker: a FIFO of jobs on one thread, with Work objects that report each job's outcome.
#include "serial_worker.h"

#include "zoff/core/error.h"

namespace zoff::dist {

struct SerialWorker::Job final : Work {
  explicit Job(std::function<void()> body) : body(std::move(body)) {}

  void wait() override {
    std::unique_lock<std::mutex> lock(mutex);
    finished_cv.wait(lock, [&] { return finished; });
    if (error) std::rethrow_exception(error);
  }

  bool done() override {
    std::lock_guard<std::mutex> lock(mutex);
    return finished;
  }

  void finish(std::exception_ptr outcome) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      error = std::move(outcome);
      finished = true;
      body = nullptr;  // drops the tensors the job captured
    }
    finished_cv.notify_all();
  }

  std::function<void()> body;
  std::mutex mutex;
  std::condition_variable finished_cv;
  bool finished = false;
  std::exception_ptr error;
};

SerialWorker::SerialWorker() : thread_([this] { run(); }) {}

SerialWorker::~SerialWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

WorkPtr SerialWorker::submit(std::function<void()> job) {
  auto entry = std::make_shared<Job>(std::move(job));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ZOFF_CHECK(!stopping_, "a collective was issued on a communicator being shut down");
    queue_.push_back(entry);
  }
  wake_.notify_one();
  return entry;
}

bool SerialWorker::stopping() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stopping_;
}

void SerialWorker::run() {
  for (;;) {
    std::shared_ptr<Job> job;
    bool shutting_down = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      shutting_down = stopping_;
    }
    if (shutting_down) {
      job->finish(std::make_exception_ptr(
          Error("the communicator was shut down before this collective ran")));
    } else if (poisoned_) {
      job->finish(poisoned_);
    } else {
      try {
        job->body();
        job->finish(nullptr);
      } catch (...) {
        poisoned_ = std::current_exception();
        job->finish(poisoned_);
      }
    }
  }
}

}  // namespace zoff::dist
