// ActivationMeter: a counting wrapper around zoff's CPU allocator (core/large_block_cache.h).
#include "zoff/engine/activation_meter.h"

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "zoff/core/large_block_cache.h"

namespace zoff::engine {
namespace {

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
c10::Allocator* g_base = nullptr;

// Each block starts with a header holding its size and the base block's deleter, so the
// deleter, which gets only the data pointer (LibTorch's raw_allocate contract: context ==
// data), can un-count and free it. 64 bytes keep the data as aligned as the base's.
constexpr size_t kHeaderBytes = 64;
struct Header {
  size_t bytes;
  c10::DeleterFnPtr free_base;
};
static_assert(sizeof(Header) <= kHeaderBytes);

void counted_delete(void* data) {
  if (data == nullptr) return;
  char* raw = static_cast<char*>(data) - kHeaderBytes;
  Header header{};
  std::memcpy(&header, raw, sizeof header);
  g_live.fetch_sub(static_cast<int64_t>(header.bytes), std::memory_order_relaxed);
  header.free_base(raw);
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr base = g_base->allocate(n + kHeaderBytes);
    // The base's blocks are their own contexts (its small and large deleters alike), so
    // the data pointer is all the deleter needs.
    TORCH_INTERNAL_ASSERT(base.get() == base.get_context());
    const Header header{n, base.get_deleter()};
    char* raw = static_cast<char*>(base.release_context());
    std::memcpy(raw, &header, sizeof header);
    const int64_t live = g_live.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed) +
                         static_cast<int64_t>(n);
    int64_t peak = g_peak.load(std::memory_order_relaxed);
    while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
    }
    void* data = raw + kHeaderBytes;
    return {data, data, &counted_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &counted_delete; }
  void copy_data(void* dest, const void* src, size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Leaked on purpose: tensors may outlive every meter and are freed through it. Over
    // the large-block cache, which passes everything to LibTorch's default allocator until
    // the engine's heap policy turns it on (core/heap_policy.h).
    g_base = &large_block_cache();
    static auto* counting = new CountingCpuAllocator();
    note_allocator_over_large_block_cache(counting);
    c10::SetCPUAllocator(counting, /*priority=*/1);
  });
}

}  // namespace

ActivationMeter::ActivationMeter() {
  install_once();
  mark_baseline();
}

int64_t ActivationMeter::live_bytes() { return g_live.load(std::memory_order_relaxed); }

int64_t ActivationMeter::peak_live_bytes() { return g_peak.load(std::memory_order_relaxed); }

void ActivationMeter::reset_peak() { g_peak.store(live_bytes(), std::memory_order_relaxed); }

void ActivationMeter::mark_baseline() { baseline_ = live_bytes(); }

void ActivationMeter::sample_before_backward() {
  kept_ = std::max(kept_, static_cast<size_t>(std::max<int64_t>(0, live_bytes() - baseline_)));
}

}  // namespace zoff::engine
