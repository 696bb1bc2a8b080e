// Records LibTorch's op start/end events (RecordFunction) into per-thread buffers allocated
// before the profiled span, so that profiling a step takes no memory from the heap.
//
// Why not LibTorch's own profilers: both the legacy one and Kineto allocate their events
// on the heap while the step runs, between the step's tensors. Freed activations then no
// longer coalesce, the next step's tensors come from fresh pages, and RSS grows by about a
// step's activations per profiled step (measured, LibTorch 1.13.1: gpt small, bf16, stage 2,
// 2 ranks: 1,579 ms per profiled step instead of ~630, peak RSS 4.1 GB instead of 0.85; the
// same in plain Python with torch.profiler). The profile then describes a different step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zoff::train::detail {

// Bytes kept of an op's name (NUL included); longer names are cut, which the table does
// anyway (it prints 44 characters).
constexpr size_t kOpNameBytes = 80;

// One start or end of an op on one thread. 96 bytes.
struct OpEvent {
  int64_t ns = 0;      // steady clock, nanoseconds
  bool start = false;  // the op's start (else its end)
  char name[kOpNameBytes] = {};
};

// The events of one recording, one list per thread that ran ops, each in the order its
// thread recorded them (starts and ends nest properly on a thread); the first list is the
// thread that started the recording.
using ThreadOpEvents = std::vector<std::vector<OpEvent>>;

// Events each thread's buffer holds before it has to grow (a new mapping twice the size and
// a copy): gpt small records ~12,000 events per step, so 2^17 covers ten steps. 12 MiB per
// recording thread, mapped outside glibc's heap and populated when the buffer is made, so
// that recording takes neither heap memory nor page faults.
constexpr size_t kEventsPerThread = size_t{1} << 17;

// Starts recording on the calling thread and on the threads LibTorch propagates its
// thread-local state to (its intra-op pool). One recording per process at a time: throws
// zoff::Error if one is running.
void start_op_recording();

// Stops the recording started on this thread and returns its events. Throws zoff::Error if
// none is running.
ThreadOpEvents stop_op_recording();

}  // namespace zoff::train::detail
