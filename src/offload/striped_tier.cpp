// The striped NVMe tier: each region spread over one NVMe tier per directory in fixed stripes,
// so a large transfer keeps several drives busy at once (ZeRO-Infinity's swap over drives).
#include <algorithm>
#include <filesystem>
#include <vector>

#include "transfer.h"
#include "zoff/core/error.h"
#include "zoff/offload/tier.h"

namespace zoff::offload {

namespace {

// Completes when every part of a striped transfer has: each part waits with its own tier's
// timeout and throws its own error (naming its file), so the whole never waits unbounded.
class StripedCompletion : public IoCompletion {
 public:
  explicit StripedCompletion(std::vector<IoRequest> parts) : parts_(std::move(parts)) {}
  bool wait_for(std::chrono::milliseconds) override {
    for (auto& p : parts_) p.wait();
    return true;
  }

 private:
  std::vector<IoRequest> parts_;
};

// Logical byte o of a region lies in stripe i = o / stripe; stripe i is in part i % N, at
// byte (i / N) * stripe + o % stripe of that part's region. Only the region's last stripe
// may be short, so every part's region holds whole stripes but perhaps its last.
class StripedRegion : public TierRegion {
 public:
  StripedRegion(std::string name, size_t bytes, size_t stripe, size_t alignment,
                std::vector<std::unique_ptr<TierRegion>> parts)
      : name_(std::move(name)),
        bytes_(bytes),
        stripe_(stripe),
        alignment_(alignment),
        parts_(std::move(parts)) {}

  const std::string& name() const override { return name_; }
  size_t bytes() const override { return bytes_; }
  void* host_data() override { return nullptr; }
  IoRequest read(uint64_t offset, void* buf, size_t n) override {
    return start(IoOp::kRead, offset, static_cast<char*>(buf), n);
  }
  IoRequest write(uint64_t offset, const void* buf, size_t n) override {
    return start(IoOp::kWrite, offset, static_cast<char*>(const_cast<void*>(buf)), n);
  }
  void check() const override {
    for (const auto& p : parts_) p->check();
  }

 private:
  // One request per stripe touched, each on its part's region; a part's failure surfaces at
  // wait() with the part's own message (its file, offset, errno).
  IoRequest start(IoOp op, uint64_t offset, char* buf, size_t n) {
    check_transfer_rules(op, name_, bytes_, alignment_, offset, buf, n);
    if (n == 0) return IoRequest();
    std::vector<IoRequest> parts;
    const size_t count = parts_.size();
    for (size_t done = 0; done < n;) {
      const uint64_t at = offset + done;
      const uint64_t stripe = at / stripe_;
      const size_t within = static_cast<size_t>(at % stripe_);
      const size_t len = std::min(n - done, stripe_ - within);
      const uint64_t part_offset = (stripe / count) * stripe_ + within;
      TierRegion& part = *parts_[stripe % count];
      parts.push_back(op == IoOp::kRead ? part.read(part_offset, buf + done, len)
                                        : part.write(part_offset, buf + done, len));
      done += len;
    }
    if (parts.size() == 1) return std::move(parts.front());
    return IoRequest(std::make_unique<StripedCompletion>(std::move(parts)),
                     std::chrono::milliseconds(0),
                     detail::concat(to_string(op), " of ", n, " bytes at ", offset, " of ", name_,
                                    " (striped)"));
  }

  std::string name_;
  size_t bytes_;
  size_t stripe_;
  size_t alignment_;
  std::vector<std::unique_ptr<TierRegion>> parts_;
};

class StripedTier : public Tier {
 public:
  StripedTier(std::vector<std::unique_ptr<Tier>> parts, size_t stripe)
      : parts_(std::move(parts)), stripe_(stripe) {}

  std::string name() const override { return "nvme_striped"; }
  bool is_host() const override { return false; }
  size_t alignment() const override { return parts_.front()->alignment(); }

  std::unique_ptr<TierRegion> allocate(const std::string& name, size_t bytes) override {
    const size_t count = parts_.size();
    const size_t stripes = (bytes + stripe_ - 1) / stripe_;
    std::vector<std::unique_ptr<TierRegion>> regions;
    for (size_t k = 0; k < count; ++k) {
      // Stripes k, k + N, ...: whole ones, but the region's last stripe may be short.
      const size_t mine = stripes > k ? (stripes - k + count - 1) / count : 0;
      size_t part_bytes = mine * stripe_;
      if (mine > 0 && (stripes - 1) % count == k) part_bytes -= stripes * stripe_ - bytes;
      regions.push_back(parts_[k]->allocate(name, part_bytes));
    }
    return std::make_unique<StripedRegion>(name, bytes, stripe_, alignment(), std::move(regions));
  }

  TierUsage usage() const override {
    TierUsage total;
    for (const auto& p : parts_) {
      const TierUsage u = p->usage();
      total.host_bytes += u.host_bytes;
      total.disk_bytes += u.disk_bytes;
    }
    return total;
  }

  std::string io_description() const override {
    return parts_.front()->io_description() + ", striped over " + std::to_string(parts_.size()) +
           " directories";
  }

 private:
  std::vector<std::unique_ptr<Tier>> parts_;
  size_t stripe_;
};

}  // namespace

std::unique_ptr<Tier> make_striped_nvme_tier(const std::vector<std::string>& dirs,
                                             const std::string& owner, const AioOptions& aio,
                                             size_t stripe_bytes) {
  ZOFF_CHECK_ARG(dirs.size() >= 2, "striped NVMe tier: ", dirs.size(),
                 " directories given, it needs at least 2 (one is the plain NVMe tier)");
  std::vector<std::unique_ptr<Tier>> parts;
  for (const auto& dir : dirs) {
    for (size_t k = 0; k < parts.size(); ++k) {
      std::error_code ec;
      ZOFF_CHECK_ARG(!std::filesystem::equivalent(dirs[k], dir, ec), "striped NVMe tier: '", dir,
                     "' and '", dirs[k], "' are the same directory (one stripe per directory)");
    }
    parts.push_back(make_nvme_tier(dir, owner, aio));
  }
  const size_t align = parts.front()->alignment();
  ZOFF_CHECK_ARG(stripe_bytes > 0 && stripe_bytes % align == 0, "striped NVMe tier: stripe of ",
                 stripe_bytes, " bytes: must be a positive multiple of ", align);
  return std::make_unique<StripedTier>(std::move(parts), stripe_bytes);
}

}  // namespace zoff::offload
