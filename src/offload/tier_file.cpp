// The file behind one NVMe region: O_DIRECT (buffered fallback), preallocated, checked.
#include "tier_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "io_error.h"
#include "zoff/core/error.h"

namespace zoff::offload {

namespace {

constexpr int kCreateFlags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;

// Sizes the new file. Filesystems without fallocate get a sparse file (ftruncate): the
// space is then not reserved, but the file still reads as zeros.
int reserve(int fd, size_t bytes) {
  if (bytes == 0) return 0;
  if (fallocate(fd, 0, 0, static_cast<off_t>(bytes)) == 0) return 0;
  const int err = errno;
  if (err != EOPNOTSUPP) return err;
  return ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
}

}  // namespace

TierFile::TierFile(std::string path, size_t bytes, bool direct)
    : path_(std::move(path)), bytes_(bytes), direct_(direct) {
  if (direct_) {
    fd_ = open(path_.c_str(), kCreateFlags | O_DIRECT, 0600);
    if (fd_ < 0 && errno == EINVAL) direct_ = false;  // tmpfs and friends refuse O_DIRECT
  }
  if (!direct_) fd_ = open(path_.c_str(), kCreateFlags, 0600);
  if (fd_ < 0) throw_errno("create", path_, errno);
  const int err = reserve(fd_, bytes_);
  if (err != 0) {
    close(fd_);
    unlink(path_.c_str());
    throw_errno(detail::concat("fallocate of ", bytes_, " bytes"), path_, err);
  }
}

TierFile::~TierFile() {
  if (fd_ < 0) return;
  close(fd_);
  unlink(path_.c_str());  // may already be gone (deleted under us): nothing to do then
}

void TierFile::check() const {
  struct stat st {};
  if (fstat(fd_, &st) != 0) throw_errno("fstat", path_, errno);
  ZOFF_CHECK(st.st_nlink > 0, "NVMe tier file ", path_,
             " was deleted while in use (its data can no longer be trusted)");
  ZOFF_CHECK(static_cast<size_t>(st.st_size) >= bytes_, "NVMe tier file ", path_,
             " was truncated while in use: ", st.st_size, " bytes, expected ", bytes_);
}

}  // namespace zoff::offload
