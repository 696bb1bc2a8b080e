// Reads VmHWM / VmRSS from /proc/self/status.
#include "zoff/core/process_memory.h"

#include <fstream>
#include <string>

namespace zoff {
namespace {

int64_t status_kib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == field) {
      int64_t kib = 0;
      status >> kib;
      return kib;
    }
    status.ignore(1 << 16, '\n');
  }
  return 0;
}

}  // namespace

int64_t peak_rss_bytes() { return status_kib("VmHWM:") * 1024; }

int64_t current_rss_bytes() { return status_kib("VmRSS:") * 1024; }

bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return static_cast<bool>(clear);
}

int64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

}  // namespace zoff
