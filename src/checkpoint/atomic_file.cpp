// AtomicFileWriter and the small POSIX file routines the checkpoint code is built on.
#include "zoff/checkpoint/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "zoff/core/error.h"
#include "zoff/core/output_path.h"

namespace zoff::checkpoint {
namespace {

// zlib's crc32 takes an unsigned int length: feed it at most 1 GiB at a time.
constexpr size_t kCrcChunkBytes = size_t{1} << 30;
// Read size of digest_file: large enough for full disk speed, small enough to not matter.
constexpr size_t kDigestChunkBytes = size_t{4} << 20;

std::string errno_text() { return std::strerror(errno); }

uint32_t crc_update(uint32_t crc, const void* data, size_t bytes) {
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {
    const size_t n = std::min(bytes, kCrcChunkBytes);
    crc = static_cast<uint32_t>(::crc32(crc, p, static_cast<uInt>(n)));
    p += n;
    bytes -= n;
  }
  return crc;
}

std::string parent_dir(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  crc_ = static_cast<uint32_t>(::crc32(0L, Z_NULL, 0));
  fd_ = ::open(temp_path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ZOFF_CHECK(fd_ >= 0, "cannot create ", temp_path(), ": ", errno_text());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path().c_str());
  }
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  ZOFF_CHECK(fd_ >= 0, "write to ", path_, " after commit");
  crc_ = crc_update(crc_, data, bytes);
  const auto* p = static_cast<const char*>(data);
  size_t left = bytes;
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    ZOFF_CHECK(n > 0, "cannot write ", temp_path(), ": ", n < 0 ? errno_text() : "no progress");
    p += n;
    left -= static_cast<size_t>(n);
  }
  bytes_ += bytes;
}

void AtomicFileWriter::commit() {
  ZOFF_CHECK(fd_ >= 0, "commit of ", path_, " twice");
  try {
    check_replaceable("cannot write", path_);  // the rename would replace a device, a dir...
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    ::unlink(temp_path().c_str());
    throw;
  }
  ZOFF_CHECK(::fsync(fd_) == 0, "cannot fsync ", temp_path(), ": ", errno_text());
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0 || ::rename(temp_path().c_str(), path_.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(temp_path().c_str());
    throw Error(detail::concat("cannot move ", temp_path(), " to ", path_, ": ", why));
  }
  fsync_directory(parent_dir(path_));
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicFileWriter out(path);
  out.write(text.data(), text.size());
  out.commit();
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ZOFF_CHECK(fd >= 0, "cannot open directory ", dir, ": ", errno_text());
  const int rc = ::fsync(fd);
  const std::string why = errno_text();
  ::close(fd);
  ZOFF_CHECK(rc == 0, "cannot fsync directory ", dir, ": ", why);
}

std::string read_text_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ZOFF_CHECK_ARG(fd >= 0, "cannot read ", path, ": ", errno_text());
  std::string text;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const bool failed = n < 0;
      const std::string why = errno_text();
      ::close(fd);
      ZOFF_CHECK_ARG(!failed, "cannot read ", path, ": ", why);
      return text;
    }
    text.append(buf, static_cast<size_t>(n));
  }
}

FileDigest digest_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ZOFF_CHECK_ARG(fd >= 0, "cannot read ", path, ": ", errno_text());
  FileDigest d;
  d.crc32 = static_cast<uint32_t>(::crc32(0L, Z_NULL, 0));
  std::vector<char> buf(kDigestChunkBytes);
  while (true) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const bool failed = n < 0;
      const std::string why = errno_text();
      ::close(fd);
      ZOFF_CHECK(!failed, "cannot read ", path, ": ", why);
      return d;
    }
    d.crc32 = crc_update(d.crc32, buf.data(), static_cast<size_t>(n));
    d.bytes += static_cast<uint64_t>(n);
  }
}

void read_exact(int fd, const std::string& path, uint64_t offset, void* out, size_t bytes) {
  auto* p = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    ZOFF_CHECK(n >= 0, "cannot read ", path, ": ", errno_text());
    ZOFF_CHECK_ARG(n > 0, path, ": truncated (ends before byte ", offset + bytes, ")");
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
}

}  // namespace zoff::checkpoint
