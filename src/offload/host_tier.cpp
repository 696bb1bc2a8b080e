// Host memory tiers, pageable ("cpu") or locked ("cpu_pinned"): transfers are memcpy, done at once.
#include <cstring>
#include <mutex>
#include <set>

#include "transfer.h"
#include "zoff/core/error.h"
#include "zoff/core/huge_pages.h"
#include "zoff/core/round_up.h"
#include "zoff/offload/host_buffer.h"
#include "zoff/offload/tier.h"

namespace zoff::offload {

namespace {

constexpr size_t kHostAlignment = 64;  // bytes: one cache line, what the SIMD kernels want

class HostTier;

// Bytes of host memory: a mapping of their own, huge-page advised, from 2 MiB up (optimizer
// states are stepped in place here, core/huge_pages.h says why that matters) unless they are
// to be locked; a HostBuffer otherwise. Zero-filled either way.
class HostBytes {
 public:
  HostBytes(size_t bytes, bool lock) : bytes_(bytes) {
    if (!lock && bytes >= kHugePageBytes) {
      mapped_ = round_up(bytes, kHugePageBytes);
      data_ = map_huge_aligned(mapped_);
    } else {
      buffer_ = HostBuffer(bytes, kHostAlignment, lock);
      data_ = buffer_.data();
    }
  }
  ~HostBytes() {
    if (mapped_ > 0) unmap_huge_aligned(data_, mapped_);
  }
  HostBytes(const HostBytes&) = delete;
  HostBytes& operator=(const HostBytes&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  size_t capacity() const { return mapped_ > 0 ? mapped_ : buffer_.capacity(); }

 private:
  size_t bytes_;
  size_t mapped_ = 0;  // > 0: data_ is a mapping of this many bytes
  HostBuffer buffer_;
  void* data_ = nullptr;
};

class HostRegion : public TierRegion {
 public:
  HostRegion(HostTier* tier, std::string name, size_t bytes, bool lock)
      : tier_(tier), name_(std::move(name)), memory_(bytes, lock) {}
  ~HostRegion() override;

  const std::string& name() const override { return name_; }
  size_t bytes() const override { return memory_.bytes(); }
  void* host_data() override { return memory_.data(); }

  IoRequest read(uint64_t offset, void* buf, size_t n) override {
    check_transfer_rules(IoOp::kRead, name_, bytes(), kHostAlignment, offset, buf, n);
    if (n > 0) std::memcpy(buf, static_cast<const char*>(memory_.data()) + offset, n);
    return IoRequest();  // complete: nothing was left in flight
  }

  IoRequest write(uint64_t offset, const void* buf, size_t n) override {
    check_transfer_rules(IoOp::kWrite, name_, bytes(), kHostAlignment, offset, buf, n);
    if (n > 0) std::memcpy(static_cast<char*>(memory_.data()) + offset, buf, n);
    return IoRequest();
  }

  void check() const override {}  // host memory cannot be deleted or truncated under us

  size_t capacity() const { return memory_.capacity(); }

 private:
  HostTier* tier_;
  std::string name_;
  HostBytes memory_;
};

class HostTier : public Tier {
 public:
  explicit HostTier(bool lock) : lock_(lock) {}

  std::string name() const override { return lock_ ? "cpu_pinned" : "cpu"; }
  bool is_host() const override { return true; }
  size_t alignment() const override { return kHostAlignment; }
  std::string io_description() const override { return "memory"; }

  std::unique_ptr<TierRegion> allocate(const std::string& name, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ZOFF_CHECK_ARG(names_.count(name) == 0, name_prefix(), "region '", name, "' already exists");
    auto region = std::make_unique<HostRegion>(this, name, bytes, lock_);
    names_.insert(name);
    host_bytes_ += region->capacity();
    return region;
  }

  TierUsage usage() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return TierUsage{host_bytes_, 0};
  }

  void release(const std::string& name, size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    names_.erase(name);
    host_bytes_ -= capacity;
  }

 private:
  std::string name_prefix() const { return "tier " + name() + ": "; }

  const bool lock_;
  mutable std::mutex mutex_;
  std::set<std::string> names_;
  size_t host_bytes_ = 0;  // capacities of the live regions
};

HostRegion::~HostRegion() { tier_->release(name_, memory_.capacity()); }

}  // namespace

std::unique_ptr<Tier> make_host_tier(bool lock) { return std::make_unique<HostTier>(lock); }

}  // namespace zoff::offload
