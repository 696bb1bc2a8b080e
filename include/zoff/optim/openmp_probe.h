// A streaming probe run by OpenMP's threads: the memory bound of the Adam step, independent
// of zoff's own thread pool (see `zoff bench optim`).
#pragma once

#include <cstddef>

namespace zoff::optim {

// Floats per work item of the probe's parallel loop: one 64-byte cache line of each stream.
constexpr size_t kProbeLineFloats = 16;

// `omp parallel for schedule(static)` with `threads` threads over the 16-float lines of
// [0, n): reads p, g, m, v and writes p, m, v (28 bytes per element, as adam_fp32 in
// stream_probe), one add per stream. The values it writes are meaningless.
void openmp_stream_probe(float* p, const float* g, float* m, float* v, size_t n, int threads);

}  // namespace zoff::optim
