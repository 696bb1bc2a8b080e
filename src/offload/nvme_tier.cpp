// The NVMe tier: one preallocated file per region under nvme_path, moved by the tier's I/O engine.
#include <iostream>
#include <mutex>
#include <set>

#include "io_engine.h"
#include "io_error.h"
#include "io_faults_internal.h"
#include "tier_directory.h"
#include "tier_file.h"
#include "transfer.h"
#include "zoff/core/error.h"
#include "zoff/core/round_up.h"
#include "zoff/offload/tier.h"

namespace zoff::offload {

namespace {

constexpr size_t kDirectIoAlignment = 4096;  // bytes: O_DIRECT offsets, lengths and buffers

size_t padded(size_t bytes) { return round_up(bytes, kDirectIoAlignment); }

void warn_buffered_once(const std::string& dir) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::cerr << "zoff: warning: " << dir
              << " refuses O_DIRECT (open: Invalid argument): NVMe tier files are opened "
                 "buffered, through the page cache\n";
  });
}

class NvmeTier;

class NvmeRegion : public TierRegion {
 public:
  NvmeRegion(NvmeTier* tier, std::string name, size_t bytes, std::unique_ptr<TierFile> file)
      : tier_(tier), name_(std::move(name)), bytes_(bytes), file_(std::move(file)) {}
  ~NvmeRegion() override;

  const std::string& name() const override { return name_; }
  size_t bytes() const override { return bytes_; }
  void* host_data() override { return nullptr; }
  IoRequest read(uint64_t offset, void* buf, size_t n) override {
    return start(IoOp::kRead, offset, static_cast<char*>(buf), n);
  }
  IoRequest write(uint64_t offset, const void* buf, size_t n) override {
    // The engine only reads a write's buffer; Transfer keeps one pointer type for both.
    return start(IoOp::kWrite, offset, static_cast<char*>(const_cast<void*>(buf)), n);
  }
  void check() const override { file_->check(); }
  size_t file_bytes() const { return file_->bytes(); }

 private:
  IoRequest start(IoOp op, uint64_t offset, char* buf, size_t n);

  NvmeTier* tier_;
  std::string name_;
  size_t bytes_;
  std::unique_ptr<TierFile> file_;
};

class NvmeTier : public Tier {
 public:
  NvmeTier(const std::string& dir, const std::string& owner, const AioOptions& aio)
      : aio_(aio), directory_(dir, owner), engine_(make_io_engine(aio)) {
    if (aio_.direct && !directory_.direct_supported()) warn_buffered_once(dir);
  }

  std::string name() const override { return "nvme"; }
  bool is_host() const override { return false; }
  size_t alignment() const override { return kDirectIoAlignment; }
  std::unique_ptr<TierRegion> allocate(const std::string& name, size_t bytes) override;
  TierUsage usage() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return TierUsage{0, disk_bytes_};
  }
  std::string io_description() const override;

  const AioOptions& aio() const { return aio_; }
  IoEngine& engine() { return *engine_; }
  void release(const std::string& name, size_t file_bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    names_.erase(name);
    disk_bytes_ -= file_bytes;
  }

 private:
  const AioOptions aio_;
  TierDirectory directory_;  // declared before engine_: the lock outlives the last transfer
  std::unique_ptr<IoEngine> engine_;
  mutable std::mutex mutex_;
  std::set<std::string> names_;
  size_t disk_bytes_ = 0;  // padded sizes of the live regions' files
};

std::unique_ptr<TierRegion> NvmeTier::allocate(const std::string& name, size_t bytes) {
  ZOFF_CHECK_ARG(is_region_name(name), "tier nvme: region name '", name,
                 "': must be a non-empty name of [a-z0-9_.]");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ZOFF_CHECK_ARG(names_.count(name) == 0, "tier nvme: region '", name, "' already exists");
    names_.insert(name);
  }
  std::unique_ptr<TierFile> file;
  try {
    const bool direct = aio_.direct && directory_.direct_supported();
    file = std::make_unique<TierFile>(directory_.file_path(name), padded(bytes), direct);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    names_.erase(name);
    throw;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  disk_bytes_ += file->bytes();
  return std::make_unique<NvmeRegion>(this, name, bytes, std::move(file));
}

std::string NvmeTier::io_description() const {
  std::string how = engine_->description();
  if (!aio_.direct) return how + ", buffered (direct = false)";
  if (!directory_.direct_supported()) return how + ", buffered (O_DIRECT refused)";
  return how + ", O_DIRECT";
}

NvmeRegion::~NvmeRegion() { tier_->release(name_, file_->bytes()); }

IoRequest NvmeRegion::start(IoOp op, uint64_t offset, char* buf, size_t n) {
  check_transfer_rules(op, name_, bytes_, kDirectIoAlignment, offset, buf, n);
  if (n == 0) return IoRequest();
  // A file deleted or truncated under us fails here, before any byte moves (one fstat).
  file_->check();
  const AioOptions& aio = tier_->aio();
  TransferSpec spec;
  spec.op = op;
  spec.fd = file_->fd();
  spec.path = file_->path();
  spec.file_bytes = file_->bytes();
  spec.offset = offset;
  spec.buf = buf;
  spec.length = padded(n);
  spec.block_size = aio.block_size;
  spec.alignment = kDirectIoAlignment;
  spec.direct = file_->direct();
  auto transfer = std::make_shared<Transfer>(std::move(spec));
  tier_->engine().submit(transfer);
  std::string what =
      detail::concat(to_string(op), " of ", n, " bytes at ", offset, " of ", file_->path());
  return IoRequest(std::make_unique<TransferCompletion>(std::move(transfer)), aio.timeout,
                   std::move(what));
}

}  // namespace

std::unique_ptr<Tier> make_nvme_tier(const std::string& dir, const std::string& owner,
                                     const AioOptions& aio) {
  validate_aio_options(aio);
  install_env_io_fault_hook();
  return std::make_unique<NvmeTier>(dir, owner, aio);
}

}  // namespace zoff::offload
