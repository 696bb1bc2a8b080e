// The file behind one NVMe region: O_DIRECT (buffered fallback), preallocated, checked.
#pragma once

#include <cstddef>
#include <string>

namespace zoff::offload {

class TierFile {
 public:
  // Creates `path` (which must not exist) of `bytes` bytes, preallocated with fallocate so
  // a full disk fails here; zero-filled. With `direct`, opens with O_DIRECT and falls back
  // to buffered I/O when the filesystem refuses it (direct() then says false). Throws
  // zoff::Error naming the file and errno (ENOSPC, EEXIST...); nothing is left behind.
  TierFile(std::string path, size_t bytes, bool direct);
  ~TierFile();  // closes and removes the file
  TierFile(const TierFile&) = delete;
  TierFile& operator=(const TierFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  size_t bytes() const { return bytes_; }
  bool direct() const { return direct_; }

  // One fstat: throws zoff::Error naming the file when it was deleted (no links left) or
  // is shorter than bytes() (truncated).
  void check() const;

 private:
  std::string path_;
  size_t bytes_ = 0;
  bool direct_ = false;
  int fd_ = -1;
};

}  // namespace zoff::offload
