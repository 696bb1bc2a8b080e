// Where bytes live: host memory (pageable or locked) or files on NVMe, behind one small interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zoff/offload/aio_options.h"
#include "zoff/offload/io_request.h"

namespace zoff::offload {

// A named span of `bytes` bytes in a tier (a rank's fp32 master, one optimizer state, its
// 16-bit parameter shard...). Transfers to and from host memory are asynchronous, with an
// explicit wait (IoRequest). Rules for the host side of a transfer, checked with
// zoff::Error: `buf` is aligned to the tier's alignment(), `offset` is a multiple of it,
// and `buf` has room for `n` rounded up to the alignment (a HostBuffer of n bytes has):
// the tail of a transfer that is not a multiple of the alignment is padded, and the padding
// of a read is garbage. offset + n <= bytes(). Different regions may be used from different
// threads at once; one region's transfers may overlap only on disjoint ranges.
class TierRegion {
 public:
  virtual ~TierRegion() = default;
  virtual const std::string& name() const = 0;
  virtual size_t bytes() const = 0;
  // Host tiers: the bytes themselves (valid for the region's life); NVMe: nullptr.
  virtual void* host_data() = 0;
  virtual IoRequest read(uint64_t offset, void* buf, size_t n) = 0;
  virtual IoRequest write(uint64_t offset, const void* buf, size_t n) = 0;
  // Checks the region's storage is still there and whole (NVMe: the file was not deleted
  // or truncated); throws zoff::Error naming the file otherwise. Cheap (one fstat).
  virtual void check() const = 0;
};

// Bytes this tier holds: in RAM (host tiers, and the NVMe tier's own staging) and on disk.
struct TierUsage {
  size_t host_bytes = 0;
  size_t disk_bytes = 0;
};

// A tier allocates regions. Regions must not outlive their tier.
class Tier {
 public:
  virtual ~Tier() = default;
  virtual std::string name() const = 0;  // "cpu", "cpu_pinned", "nvme", "nvme_striped"
  virtual bool is_host() const = 0;
  virtual size_t alignment() const = 0;  // 64 for host tiers, 4096 for nvme
  // A region of `bytes` bytes, zero-filled. `name` is unique within the tier ([a-z0-9_.]+;
  // it names the NVMe file). Throws zoff::Error naming the file and errno on ENOSPC etc.
  virtual std::unique_ptr<TierRegion> allocate(const std::string& name, size_t bytes) = 0;
  virtual TierUsage usage() const = 0;
  // "memory" for host tiers; e.g. "io_uring, O_DIRECT" or "threads (io_uring refused:
  // Operation not permitted), buffered (O_DIRECT refused)" for nvme.
  virtual std::string io_description() const = 0;
};

// Host memory, pageable (`lock` false) or locked with mlock (`lock` true, tier "cpu_pinned").
std::unique_ptr<Tier> make_host_tier(bool lock);

// Files under `dir` (created if missing; must be a directory we can write), one per region:
// `<dir>/<owner>.<region>.swp`, 4096-byte aligned, preallocated (fallocate) so a full disk
// fails at allocate(), not mid-run. `owner` ("zoff_rank0") also names a lock file
// `<dir>/<owner>.lock` held (flock) for the tier's life: a second live run on the same
// owner is refused with zoff::UsageError; files `<owner>.*.swp` left by a killed run are
// removed at start with one warning line (never reused). The tier removes its files when
// destroyed. I/O follows `aio` (io_uring or the pread/pwrite pool; see AioOptions).
// A bad `dir` (not a directory, not writable) throws zoff::UsageError naming it.
std::unique_ptr<Tier> make_nvme_tier(const std::string& dir, const std::string& owner,
                                     const AioOptions& aio);

// Bytes per stripe of the striped tier: large enough that a sub-group's transfer stays a few
// big requests per drive, small enough that a 40 MB sub-group spreads over every drive.
inline constexpr size_t kDefaultStripeBytes = size_t{1} << 20;

// One NVMe tier per directory in `dirs` (two or more, distinct), each region striped over
// them in `stripe_bytes` stripes (a multiple of 4096): stripe i of a region lives in
// `<dirs[i % N]>/<owner>.<region>.swp`. Same rules, locks and cleanup as make_nvme_tier in
// each directory; a transfer touching several stripes completes when all its parts have.
std::unique_ptr<Tier> make_striped_nvme_tier(const std::vector<std::string>& dirs,
                                             const std::string& owner, const AioOptions& aio,
                                             size_t stripe_bytes = kDefaultStripeBytes);

}  // namespace zoff::offload
