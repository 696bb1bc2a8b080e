// SharedSegment: a named POSIX shared-memory region that the ranks of one host map together.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zoff::dist {

// One rank creates the segment under a fresh name (its pid and a random nonce), the others
// open it by that name; every rank then sees the same pages. The segment starts with a page
// of its own (the nonce and the size) so that an opener can refuse a namesake that belongs
// to another job; data() is the page-aligned region after it, zero-filled at creation.
// The pages are reserved when the segment is created: a /dev/shm too small for it (containers
// often give 64 MB) fails there with zoff::Error, not with SIGBUS on first touch.
class SharedSegment {
 public:
  static SharedSegment create(size_t data_bytes);
  // Opens a segment another rank created; zoff::Error if it is missing or its size or nonce
  // differ from what the creator announced.
  static SharedSegment open(const std::string& name, size_t data_bytes, uint64_t nonce);

  SharedSegment() = default;
  SharedSegment(SharedSegment&& other) noexcept;
  SharedSegment& operator=(SharedSegment&& other) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  ~SharedSegment();  // unmaps; the creator also removes the name if unlink() was not called

  std::byte* data() const { return data_; }
  size_t data_bytes() const { return data_bytes_; }
  const std::string& name() const { return name_; }
  uint64_t nonce() const { return nonce_; }
  // Removes the name; the mapping stays valid. Called once every rank has mapped it, so
  // that nothing is left in /dev/shm whatever happens to the job afterwards.
  void unlink();

 private:
  void release();

  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;  // the whole mapping, header page included
  std::byte* data_ = nullptr;
  size_t data_bytes_ = 0;
  uint64_t nonce_ = 0;
  bool linked_ = false;  // this object created the name and has not removed it
};

}  // namespace zoff::dist
