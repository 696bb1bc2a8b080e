// Measures the bytes a forward pass leaves alive for backward (the activations autograd
// keeps), from the CPU allocator.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zoff::engine {

// Installs (once per process, at the first meter) a counting wrapper around LibTorch's CPU
// allocator: every CPU tensor allocated afterwards is counted while it lives. A meter
// samples the live bytes when a step or a backward ends (the baseline: activations freed)
// and when the next backward begins (the forward's activations, plus its inputs and loss,
// are alive): the difference is what forward kept. Measured, not computed from shapes; it
// counts the whole process (ranks run as threads in tests share it), and oneDNN's own
// scratch buffers are not LibTorch allocations.
class ActivationMeter {
 public:
  ActivationMeter();
  void mark_baseline();           // after backward / step
  void sample_before_backward();  // at engine.backward()
  // The most kept by one forward since the last reset (bytes), and reset.
  size_t kept_bytes() const { return kept_; }
  void reset() { kept_ = 0; }
  // Bytes of counted CPU tensors alive now.
  static int64_t live_bytes();
  // The most bytes of counted CPU tensors alive at once since the last reset_peak (or since
  // the first meter): what a piece of code needs at its worst, beyond what it started with.
  static int64_t peak_live_bytes();
  static void reset_peak();  // to live_bytes()

 private:
  int64_t baseline_ = 0;
  size_t kept_ = 0;
};

}  // namespace zoff::engine
