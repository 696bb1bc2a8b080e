// `zoff bench io`'s measurement of the NVMe tier's own I/O path for the optimizer's swap pattern.
#include "zoff/offload/io_bench.h"

#include <chrono>
#include <vector>

#include "zoff/core/error.h"
#include "zoff/offload/host_buffer.h"
#include "zoff/offload/tier.h"

namespace zoff::offload {

namespace {
constexpr size_t kAlignment = 4096;  // bytes
constexpr int kInFlight = 2;         // transfers at once: double buffering, as the swapper
}  // namespace

void validate_io_bench_options(const IoBenchOptions& o) {
  validate_aio_options(o.aio);
  ZOFF_CHECK_ARG(o.file_bytes > 0 && o.file_bytes % kAlignment == 0,
                 "bench io: --size = ", o.file_bytes, ": must be a positive multiple of ",
                 kAlignment, " bytes");
  ZOFF_CHECK_ARG(o.transfer_bytes > 0 && o.transfer_bytes % kAlignment == 0,
                 "bench io: --transfer-size = ", o.transfer_bytes,
                 ": must be a positive multiple of ", kAlignment, " bytes");
  ZOFF_CHECK_ARG(o.transfer_bytes <= o.file_bytes, "bench io: --transfer-size = ", o.transfer_bytes,
                 " exceeds --size = ", o.file_bytes);
}

struct IoBench::State {
  IoBenchOptions options;
  std::vector<HostBuffer> buffers;  // declared before the tier: outlive every transfer
  std::unique_ptr<Tier> tier;
  std::unique_ptr<TierRegion> region;

  // Streams the whole region through `kInFlight` buffers; returns GB/s.
  double pass(bool write) {
    const size_t total = options.file_bytes;
    const size_t step = options.transfer_bytes;
    std::vector<IoRequest> pending(kInFlight);
    const auto start = std::chrono::steady_clock::now();
    size_t index = 0;
    for (size_t at = 0; at < total; at += step, ++index) {
      const size_t slot = index % kInFlight;
      pending[slot].wait();  // that buffer's previous transfer has landed
      const size_t n = std::min(step, total - at);
      void* buf = buffers[slot].data();
      pending[slot] = write ? region->write(at, buf, n) : region->read(at, buf, n);
    }
    for (auto& r : pending) r.wait();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return static_cast<double>(total) / seconds / 1e9;
  }
};

IoBench::IoBench(IoBenchOptions options) : state_(std::make_unique<State>()) {
  validate_io_bench_options(options);
  state_->options = std::move(options);
  for (int i = 0; i < kInFlight; ++i) {
    state_->buffers.emplace_back(state_->options.transfer_bytes, kAlignment);
    auto* bytes = state_->buffers.back().as<unsigned char>();
    // Non-zero data, so no layer below can shortcut zero pages.
    for (size_t j = 0; j < state_->options.transfer_bytes; ++j) {
      bytes[j] = static_cast<unsigned char>(j * 131 + i);
    }
  }
  state_->tier = make_nvme_tier(state_->options.dir, "zoff_bench_io", state_->options.aio);
  state_->region = state_->tier->allocate("swap", state_->options.file_bytes);
}

IoBench::~IoBench() = default;

double IoBench::write_pass() { return state_->pass(true); }
double IoBench::read_pass() { return state_->pass(false); }
std::string IoBench::io_description() const { return state_->tier->io_description(); }

}  // namespace zoff::offload
