// The op event recorder: a thread-local RecordFunction callback writing into buffers made
// before the recording starts (see op_event_recorder.h for why).
#include "op_event_recorder.h"

#include <ATen/record_function.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>

#include "zoff/core/error.h"

namespace zoff::train::detail {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Events in a private anonymous mapping, not in glibc's heap: the recorder's own memory
// then never sits among the step's tensors, whatever their sizes and glibc's thresholds
// (a 12 MiB buffer is below the 32 MiB the engine's heap policy keeps in the heap).
class MappedEvents {
 public:
  explicit MappedEvents(size_t capacity) : capacity_(capacity) {
    void* p =
        mmap(nullptr, capacity * sizeof(OpEvent), PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);  // populated: no faults later
    ZOFF_CHECK(p != MAP_FAILED, "op recording: cannot map ", capacity * sizeof(OpEvent),
               " bytes for events");
    data_ = static_cast<OpEvent*>(p);
  }
  MappedEvents(const MappedEvents&) = delete;
  MappedEvents& operator=(const MappedEvents&) = delete;
  ~MappedEvents() { munmap(data_, capacity_ * sizeof(OpEvent)); }

  OpEvent* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  OpEvent* data_ = nullptr;
};

// One thread's events; only that thread writes them while the recording runs.
struct ThreadBuffer {
  std::unique_ptr<MappedEvents> events = std::make_unique<MappedEvents>(kEventsPerThread);
  size_t used = 0;

  void push(const char* name, bool start, int64_t ns) {
    if (used == events->capacity()) grow();
    OpEvent& e = events->data()[used++];
    size_t i = 0;
    for (; name != nullptr && name[i] != '\0' && i + 1 < kOpNameBytes; ++i) e.name[i] = name[i];
    e.name[i] = '\0';
    e.start = start;
    e.ns = ns;
  }

  void grow() {  // past kEventsPerThread: twice the room (a pause in the profiled step)
    auto bigger = std::make_unique<MappedEvents>(events->capacity() * 2);
    std::memcpy(static_cast<void*>(bigger->data()), events->data(), used * sizeof(OpEvent));
    events = std::move(bigger);
  }

  std::vector<OpEvent> take() const { return {events->data(), events->data() + used}; }
};

// The running recording. Buffers are owned here; a thread finds its own through
// `tls_buffer`, valid while `tls_generation` is the recording's generation.
struct Recording {
  std::mutex mutex;
  bool active = false;
  std::atomic<uint64_t> generation{0};  // read without the lock by buffer()
  at::CallbackHandle handle = 0;
  std::vector<std::unique_ptr<ThreadBuffer>> buffers;
};

Recording& recording() {
  static Recording r;
  return r;
}

thread_local ThreadBuffer* tls_buffer = nullptr;
thread_local uint64_t tls_generation = 0;

// The calling thread's buffer of the running recording, made on its first event (the
// thread that starts the recording gets its buffer then, before any op runs); null when no
// recording runs: a thread LibTorch handed the callback to (e.g. Gloo's worker, given the
// thread-local state of the op that queued its work) may still call it after the stop.
ThreadBuffer* this_thread_buffer() {
  Recording& r = recording();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.active) return nullptr;
  if (tls_buffer == nullptr || tls_generation != r.generation) {
    r.buffers.push_back(std::make_unique<ThreadBuffer>());
    tls_buffer = r.buffers.back().get();
    tls_generation = r.generation;
  }
  return tls_buffer;
}

ThreadBuffer* buffer() {
  // The lock only on a thread's first event of a recording; afterwards the thread-locals say
  // the buffer is current (the generation changes at every start and stop).
  if (tls_buffer != nullptr && tls_generation == recording().generation) return tls_buffer;
  return this_thread_buffer();
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (ThreadBuffer* b = buffer()) b->push(fn.name(), true, now_ns());  // the clock last
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* /*unused*/) {
  const int64_t ns = now_ns();  // the clock first: the op has ended
  if (ThreadBuffer* b = buffer()) b->push(fn.name(), false, ns);
}

}  // namespace

void start_op_recording() {
  Recording& r = recording();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    ZOFF_CHECK(!r.active, "op recording: one is already running in this process");
    r.active = true;
    ++r.generation;
    r.buffers.clear();
  }
  (void)this_thread_buffer();  // this thread's buffer now, not inside the first op
  r.handle = at::addThreadLocalCallback(at::RecordFunctionCallback(on_start, on_end));
}

ThreadOpEvents stop_op_recording() {
  Recording& r = recording();
  std::lock_guard<std::mutex> lock(r.mutex);
  ZOFF_CHECK(r.active, "op recording: none is running");
  at::removeCallback(r.handle);  // calls no callback: safe under the lock they take
  r.active = false;
  ++r.generation;  // threads' buffers are no longer current
  ThreadOpEvents out;
  for (const auto& b : r.buffers) out.push_back(b->take());
  r.buffers.clear();
  return out;
}

}  // namespace zoff::train::detail
