// SharedSegment: shm_open, reserve, map and check a segment shared by the ranks of one host.
#include "shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>

#include "zoff/core/error.h"

namespace zoff::dist {
namespace {

constexpr size_t kHeaderBytes = 4096;               // one page: data() starts page-aligned
constexpr uint64_t kMagic = 0x7a6f66662d73686dULL;  // "zoff-shm"

struct Header {
  uint64_t magic;
  uint64_t nonce;
  uint64_t data_bytes;
};

uint64_t random_nonce() {
  std::random_device entropy;
  return (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
}

// A name no earlier segment of this process had: the pid and the segment's nonce.
std::string segment_name(uint64_t nonce) {
  char text[64];
  std::snprintf(text, sizeof(text), "/zoff-%d-%016llx", static_cast<int>(getpid()),
                static_cast<unsigned long long>(nonce));
  return text;
}

void* map_shared(int fd, size_t bytes, const std::string& name) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  close(fd);
  ZOFF_CHECK(base != MAP_FAILED, "cannot map shared memory ", name, " (", bytes,
             " bytes): ", std::strerror(error));
  return base;
}

}  // namespace

SharedSegment SharedSegment::create(size_t data_bytes) {
  const uint64_t nonce = random_nonce();
  const std::string name = segment_name(nonce);
  const size_t bytes = kHeaderBytes + data_bytes;
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  ZOFF_CHECK(fd >= 0, "cannot create shared memory ", name, ": ", std::strerror(errno));
  const int reserve = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (reserve != 0) {
    close(fd);
    shm_unlink(name.c_str());
    throw Error(detail::concat("cannot reserve ", bytes, " bytes of shared memory for ", name, ": ",
                               std::strerror(reserve)));
  }
  SharedSegment segment;
  segment.name_ = name;
  segment.linked_ = true;  // from here on the destructor removes the name
  segment.base_ = map_shared(fd, bytes, name);
  segment.bytes_ = bytes;
  segment.data_ = static_cast<std::byte*>(segment.base_) + kHeaderBytes;
  segment.data_bytes_ = data_bytes;
  segment.nonce_ = nonce;
  *static_cast<Header*>(segment.base_) = Header{kMagic, nonce, data_bytes};
  return segment;
}

SharedSegment SharedSegment::open(const std::string& name, size_t data_bytes, uint64_t nonce) {
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  ZOFF_CHECK(fd >= 0, "cannot open shared memory ", name,
             " of rank 0 (is every rank on this host?): ", std::strerror(errno));
  struct stat info {};
  const size_t bytes = kHeaderBytes + data_bytes;
  if (fstat(fd, &info) != 0 || static_cast<size_t>(info.st_size) != bytes) {
    close(fd);
    throw Error(
        detail::concat("shared memory ", name, " has ", info.st_size, " bytes, expected ", bytes));
  }
  SharedSegment segment;
  segment.name_ = name;
  segment.base_ = map_shared(fd, bytes, name);
  segment.bytes_ = bytes;
  segment.data_ = static_cast<std::byte*>(segment.base_) + kHeaderBytes;
  segment.data_bytes_ = data_bytes;
  const Header& h = *static_cast<const Header*>(segment.base_);
  ZOFF_CHECK(h.magic == kMagic && h.nonce == nonce && h.data_bytes == data_bytes, "shared memory ",
             name, " belongs to another job (its header does not match)");
  segment.nonce_ = nonce;
  return segment;
}

SharedSegment::SharedSegment(SharedSegment&& other) noexcept { *this = std::move(other); }

SharedSegment& SharedSegment::operator=(SharedSegment&& other) noexcept {
  if (this == &other) return *this;
  release();
  name_ = std::move(other.name_);
  base_ = std::exchange(other.base_, nullptr);
  bytes_ = std::exchange(other.bytes_, 0);
  data_ = std::exchange(other.data_, nullptr);
  data_bytes_ = std::exchange(other.data_bytes_, 0);
  nonce_ = other.nonce_;
  linked_ = std::exchange(other.linked_, false);
  return *this;
}

SharedSegment::~SharedSegment() { release(); }

void SharedSegment::release() {
  unlink();
  if (base_ != nullptr) munmap(base_, bytes_);
  base_ = nullptr;
  data_ = nullptr;
}

void SharedSegment::unlink() {
  if (linked_) shm_unlink(name_.c_str());
  linked_ = false;
}

}  // namespace zoff::dist
