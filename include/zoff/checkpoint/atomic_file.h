// Crash-safe files: written under a temporary name, fsync'd, then renamed into place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zoff::checkpoint {

// Writes `path` so that a crash at any point leaves either the old file (or none) or the
// complete new one, never a torn one: bytes go to `path + ".tmp"`; commit() fsyncs it,
// renames it over `path` and fsyncs the directory so the rename itself is durable.
// Destroying an uncommitted writer removes the temporary file. I/O failures throw
// zoff::Error naming the path and errno's text.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  // CRC32 (zlib's polynomial) and length (bytes) of everything written so far.
  uint32_t crc32() const { return crc_; }
  uint64_t bytes() const { return bytes_; }
  void commit();

  const std::string& path() const { return path_; }
  std::string temp_path() const { return path_ + ".tmp"; }

 private:
  std::string path_;
  int fd_ = -1;
  uint32_t crc_ = 0;
  uint64_t bytes_ = 0;
};

// Writes `text` to `path` atomically (AtomicFileWriter).
void write_file_atomically(const std::string& path, const std::string& text);

// fsync of a directory: makes renames and removals inside it durable.
void fsync_directory(const std::string& dir);

// The whole file as a string; a missing or unreadable file is a zoff::UsageError naming it.
std::string read_text_file(const std::string& path);

// CRC32 and length of a file, read in chunks of a few MiB (never the whole file at once).
struct FileDigest {
  uint32_t crc32 = 0;
  uint64_t bytes = 0;
};
FileDigest digest_file(const std::string& path);

// Reads exactly `bytes` bytes at `offset` of an open file descriptor into `out`; a short
// file is a zoff::UsageError naming `path` (the file was truncated).
void read_exact(int fd, const std::string& path, uint64_t offset, void* out, size_t bytes);

}  // namespace zoff::checkpoint
