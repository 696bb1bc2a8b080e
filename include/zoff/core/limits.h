// Caps on counts a user gives zoff, so a typo is an error rather than a machine brought down.
#pragma once

namespace zoff {

// Intra-op threads per process (--threads, --threads-per-rank, ZOFF_NUM_THREADS): starting
// 100000 threads hung the machine.
inline constexpr int kMaxThreads = 4096;

}  // namespace zoff
