// This process's resident memory as the kernel counts it (/proc/self/status), in bytes.
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

}  // namespace zoff
