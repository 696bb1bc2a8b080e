// This process's resident memory as the kernel counts it (/proc/self/status), and the
// machine's available memory (/proc/meminfo), in bytes.
#pragma once

#include <cstdint>

namespace zoff {

// VmHWM: the most resident memory this process has had since it started (or since
// reset_peak_rss()). 0 when /proc is not readable.
int64_t peak_rss_bytes();
// VmRSS: resident memory now. 0 when /proc is not readable.
int64_t current_rss_bytes();
// Sets the high-water mark back to the current RSS (writes 5 to /proc/self/clear_refs);
// false when the kernel refuses.
bool reset_peak_rss();
// MemAvailable of /proc/meminfo: memory the kernel could still give without swapping, in
// bytes (the whole machine's, not this process's). 0 when unknown.
int64_t available_memory_bytes();

}  // namespace zoff
