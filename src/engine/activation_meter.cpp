// ActivationMeter: a counting wrapper around LibTorch's default CPU allocator.
#include "zoff/engine/activation_meter.h"

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

namespace zoff::engine {
namespace {

std::atomic<int64_t> g_live{0};
c10::Allocator* g_base = nullptr;
c10::DeleterFnPtr g_base_delete = nullptr;

// Each block starts with a header holding its size, so the deleter, which gets only the
// data pointer (LibTorch's raw_allocate contract: context == data), can un-count it. 64
// bytes keep the data as aligned as the base allocator's.
constexpr size_t kHeaderBytes = 64;

void counted_delete(void* data) {
  if (data == nullptr) return;
  char* raw = static_cast<char*>(data) - kHeaderBytes;
  size_t bytes = 0;
  std::memcpy(&bytes, raw, sizeof bytes);
  g_live.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  g_base_delete(raw);
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    char* raw = static_cast<char*>(g_base->raw_allocate(n + kHeaderBytes));
    std::memcpy(raw, &n, sizeof n);
    g_live.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
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
    // Leaked on purpose: tensors may outlive every meter and are freed through it.
    g_base = c10::GetDefaultCPUAllocator();
    g_base_delete = g_base->raw_deleter();
    static auto* counting = new CountingCpuAllocator();
    c10::SetCPUAllocator(counting, /*priority=*/1);
  });
}

}  // namespace

ActivationMeter::ActivationMeter() {
  install_once();
  mark_baseline();
}

int64_t ActivationMeter::live_bytes() { return g_live.load(std::memory_order_relaxed); }

void ActivationMeter::mark_baseline() { baseline_ = live_bytes(); }

void ActivationMeter::sample_before_backward() {
  kept_ = std::max(kept_, static_cast<size_t>(std::max<int64_t>(0, live_bytes() - baseline_)));
}

}  // namespace zoff::engine
