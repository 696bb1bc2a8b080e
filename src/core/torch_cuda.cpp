// load_torch_cuda: dlopen of the libtorch_cuda.so beside the libtorch_cpu.so in use.
#include "zoff/core/torch_cuda.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>

#include <filesystem>
#include <mutex>

namespace zoff {
namespace {

// The directory of the shared object that holds `symbol` (LibTorch's torch/lib).
std::string library_dir_of(const void* symbol) {
  Dl_info info{};
  if (dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  return std::filesystem::path(info.dli_fname).parent_path().string();
}

std::string load_once() {
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) {
    // The registry of device interfaces is data of libc10.so, which sits beside it.
    const std::string dir =
        library_dir_of(static_cast<const void*>(&c10::impl::device_guard_impl_registry));
    const std::string path = (dir.empty() ? "" : dir + "/") + "libtorch_cuda.so";
    // RTLD_GLOBAL: its kernels register themselves with the dispatcher LibTorch's CPU
    // library already holds; never unloaded.
    if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* err = dlerror();
      return "cannot load " + path + ": " + (err ? err : "unknown error");
    }
  }
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) {
    return "libtorch_cuda.so loaded but registered no CUDA device interface";
  }
  const auto count = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->deviceCount();
  if (count == 0) return "no CUDA device visible (no NVIDIA driver or GPU on this machine)";
  return "";
}

}  // namespace

std::string load_torch_cuda() {
  static std::once_flag once;
  static std::string why;
  std::call_once(once, [] { why = load_once(); });
  return why;
}

int cuda_device_count() {
  if (!load_torch_cuda().empty()) return 0;
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->deviceCount();
}

}  // namespace zoff
