// A handle on one asynchronous transfer between host memory and a tier: wait() or it never ends.
#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace zoff::offload {

// What a backend keeps for a transfer in flight. wait_for() returns true once every byte
// moved, false on timeout; it throws zoff::Error (naming the file, offset and errno) when
// the transfer failed. Called from one thread at a time.
class IoCompletion {
 public:
  virtual ~IoCompletion() = default;
  virtual bool wait_for(std::chrono::milliseconds timeout) = 0;
};

// Move-only. A default-constructed request is complete. wait() waits with the tier's
// timeout and throws zoff::Error ("... timed out after N ms") when it passes. A request
// that is destroyed unwaited is waited for in the destructor (errors are then swallowed:
// the buffer it reads or writes must not be freed under a transfer in flight).
class IoRequest {
 public:
  IoRequest() = default;
  IoRequest(std::unique_ptr<IoCompletion> completion, std::chrono::milliseconds timeout,
            std::string what);
  IoRequest(IoRequest&&) noexcept = default;
  IoRequest& operator=(IoRequest&& other) noexcept;
  ~IoRequest();

  void wait();
  bool done() const { return completion_ == nullptr; }

 private:
  std::unique_ptr<IoCompletion> completion_;
  std::chrono::milliseconds timeout_{0};
  std::string what_;  // "read of 4096 bytes at 0 of /nvme/zoff_rank0.master.swp"
};

}  // namespace zoff::offload
