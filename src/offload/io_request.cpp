// A handle on one asynchronous transfer: waits with a timeout, and never lets a buffer go early.
#include "zoff/offload/io_request.h"

#include "zoff/core/error.h"

namespace zoff::offload {

IoRequest::IoRequest(std::unique_ptr<IoCompletion> completion, std::chrono::milliseconds timeout,
                     std::string what)
    : completion_(std::move(completion)), timeout_(timeout), what_(std::move(what)) {}

namespace {

// The destructor's wait: errors were the caller's to collect with wait(); here only the
// buffer's safety matters.
void wait_quietly(std::unique_ptr<IoCompletion>& completion, std::chrono::milliseconds timeout) {
  if (!completion) return;
  try {
    completion->wait_for(timeout);
  } catch (...) {
  }
  completion.reset();
}

}  // namespace

IoRequest& IoRequest::operator=(IoRequest&& other) noexcept {
  if (this != &other) {
    wait_quietly(completion_, timeout_);
    completion_ = std::move(other.completion_);
    timeout_ = other.timeout_;
    what_ = std::move(other.what_);
  }
  return *this;
}

IoRequest::~IoRequest() { wait_quietly(completion_, timeout_); }

void IoRequest::wait() {
  if (!completion_) return;
  bool finished = false;
  try {
    finished = completion_->wait_for(timeout_);
  } catch (...) {
    completion_.reset();  // a failed transfer has ended: nothing is in flight any more
    throw;
  }
  // On a timeout the completion stays: the destructor waits once more before the buffer
  // can be freed.
  ZOFF_CHECK(finished, what_, " timed out after ", timeout_.count(), " ms");
  completion_.reset();
}

}  // namespace zoff::offload
