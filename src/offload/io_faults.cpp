// The fault-injection seam of the NVMe tier's I/O: the process-wide hook and ZOFF_IO_FAULT.
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "io_faults_internal.h"
#include "zoff/core/error.h"

namespace zoff::offload {

namespace {

constexpr size_t kShortGranule = 4096;  // bytes: a shortened request still moves whole pages

std::mutex& hook_mutex() {
  static std::mutex m;
  return m;
}
std::shared_ptr<const IoFaultHook>& hook_slot() {
  static std::shared_ptr<const IoFaultHook> hook;
  return hook;
}
std::atomic<bool> g_has_hook{false};
std::once_flag g_env_once;

void set_hook_locked(IoFaultHook hook) {
  std::lock_guard<std::mutex> lock(hook_mutex());
  if (hook) {
    hook_slot() = std::make_shared<const IoFaultHook>(std::move(hook));
  } else {
    hook_slot().reset();
  }
  g_has_hook.store(hook_slot() != nullptr, std::memory_order_release);
}

// Half the request, in whole pages, so an injected short transfer always makes progress;
// a request of one page or less runs whole.
int64_t shortened(size_t bytes) {
  const size_t half = bytes / 2 / kShortGranule * kShortGranule;
  return half == 0 ? 0 : static_cast<int64_t>(half);
}

}  // namespace

IoFaultHook parse_io_fault_spec(const std::string& spec) {
  const auto bad = [&] {
    return UsageError("ZOFF_IO_FAULT='" + spec +
                      "': expected <read|write>:<eio|enospc|short>:<bytes after which to fail>");
  };
  const size_t a = spec.find(':');
  const size_t b = a == std::string::npos ? a : spec.find(':', a + 1);
  if (b == std::string::npos) throw bad();
  const std::string op_name = spec.substr(0, a);
  const std::string kind = spec.substr(a + 1, b - a - 1);
  const std::string after_text = spec.substr(b + 1);
  if (op_name != "read" && op_name != "write") throw bad();
  if (kind != "eio" && kind != "enospc" && kind != "short") throw bad();
  char* end = nullptr;
  const unsigned long long after = std::strtoull(after_text.c_str(), &end, 10);
  if (after_text.empty() || *end != '\0') throw bad();
  const IoOp target = op_name == "read" ? IoOp::kRead : IoOp::kWrite;
  auto moved = std::make_shared<std::atomic<uint64_t>>(0);  // bytes of `target` let through
  return [target, kind, after, moved](IoOp op, const std::string&, uint64_t, size_t bytes) {
    if (op != target) return int64_t{0};
    if (moved->load() < after) {
      moved->fetch_add(bytes);
      return int64_t{0};
    }
    if (kind == "eio") return int64_t{-EIO};
    if (kind == "enospc") return int64_t{-ENOSPC};
    return shortened(bytes);
  };
}

void install_env_io_fault_hook() {
  std::call_once(g_env_once, [] {
    const char* spec = std::getenv("ZOFF_IO_FAULT");
    if (spec == nullptr || *spec == '\0') return;
    set_hook_locked(parse_io_fault_spec(spec));
  });
}

void set_io_fault_hook(IoFaultHook hook) {
  // The environment's hook counts as installed first, so this call always wins.
  try {
    install_env_io_fault_hook();
  } catch (const UsageError&) {
    // A malformed variable is reported by make_nvme_tier; an explicit hook replaces it here.
  }
  set_hook_locked(std::move(hook));
}

int64_t consult_io_fault(IoOp op, const std::string& path, uint64_t offset, size_t bytes) {
  if (!g_has_hook.load(std::memory_order_acquire)) return 0;
  std::shared_ptr<const IoFaultHook> hook;
  {
    std::lock_guard<std::mutex> lock(hook_mutex());
    hook = hook_slot();
  }
  if (!hook) return 0;
  try {
    return (*hook)(op, path, offset, bytes);
  } catch (...) {
    return -EIO;  // a hook that throws is a test's bug: fail the request, never the I/O thread
  }
}

}  // namespace zoff::offload
