// UnitGatherer: per-unit all-gather and release, forward/backward prefetch from a trace.
#include "zoff/engine/unit_gatherer.h"

#include <algorithm>
#include <cstdio>

#include "zoff/core/error.h"
#include "zoff/core/own_mapping.h"
#include "zoff/unit/activation_checkpoint.h"

namespace zoff::engine {
namespace {

// Frees a buffer's memory but keeps its storage object, which every view shares.
void free_storage(const torch::Tensor& t) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  impl->set_nbytes(0);
}

size_t bytes_of(const torch::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

// On the CPU a unit's buffer is a mapping of its own: freed, it leaves RSS at once, and
// from 2 MiB on its pages fault in 2 MiB at a time (own_mapping.h), while activations keep
// reusing the heap (heap_policy.h).
bool own_mapped(const torch::Tensor& t) {
  return t.device().is_cpu() && bytes_of(t) >= kOwnMappingMinBytes;
}

// A unit's buffer at setup: zero, and untouched while the unit starts released (so no RSS);
// small ones from the allocator.
torch::Tensor new_unit_buffer(int64_t numel, torch::ScalarType dtype) {
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  return bytes >= kOwnMappingMinBytes ? zeros_in_own_mapping(numel, dtype)
                                      : torch::zeros({numel}, torch::TensorOptions().dtype(dtype));
}

void allocate_storage(const torch::Tensor& t) {
  // A device allocator allocates on the thread's current device: make it the tensor's.
  const c10::OptionalDeviceGuard guard(t.device());
  auto* impl = t.storage().unsafeGetStorageImpl();
  const size_t bytes = bytes_of(t);
  impl->set_data_ptr_noswap(own_mapped(t) ? own_mapping_data_ptr(bytes)
                                          : impl->allocator()->allocate(bytes));
  impl->set_nbytes(bytes);
}

const std::vector<size_t> kNoUnits;

}  // namespace

UnitGatherer::UnitGatherer(
    const partition::ModelLayout& layout,
    std::unordered_map<const torch::nn::Module*, std::vector<size_t>> module_units,
    std::unique_ptr<UnitPieces> pieces, torch::ScalarType dtype, dist::CommPtr comm,
    UnitGathererOptions options)
    : layout_(layout),
      module_units_(std::move(module_units)),
      pieces_(std::move(pieces)),
      comm_(std::move(comm)),
      options_(options),
      units_(layout.units().size()) {
  ZOFF_CHECK(layout_.sharded(), "stage 3 needs a layout sharded per unit");
  TwoLargest largest;
  for (size_t u = 0; u < units_.size(); ++u) {
    const auto& lu = layout_.units()[u];
    auto& unit = units_[u];
    for (size_t s : lu.slots) {
      auto slot = layout_.slots()[s];
      slot.offset -= lu.offset;
      unit.slots.push_back(std::move(slot));
    }
    // Large units mapped, not taken from the heap: one that starts released is then never
    // touched, and one freed leaves no hole in the heap (own_mapping.h).
    unit.persistent = lu.padded_numel < options_.persistence_threshold;
    const bool released = options_.start_released && !unit.persistent;
    unit.whole = std::make_unique<partition::FlatBuffer>(
        unit.slots, new_whole_buffer(lu.padded_numel, dtype, released));
    if (!unit.persistent) largest.add(unit.whole->bytes());
    if (released) {
      free_storage(unit.whole->flat());
      unit.state = State::kReleased;
    } else {
      live_ += unit.persistent ? 0 : lu.padded_numel;
    }
  }
  peak_live_ = live_;
  spare_.set_cap(largest.sum());
}

// On the CPU (the stand-in's too) a unit's buffer is as every CPU run has it; on an
// accelerator it is the device's allocator's, not written when it is freed at once (the
// caching allocator then hands the next unit the same block: one unit's memory at setup).
torch::Tensor UnitGatherer::new_whole_buffer(int64_t numel, torch::ScalarType dtype,
                                             bool released) const {
  if (options_.device.is_cpu()) return new_unit_buffer(numel, dtype);
  const auto options = torch::TensorOptions().dtype(dtype).device(options_.device);
  return released ? torch::empty({numel}, options) : torch::zeros({numel}, options);
}

UnitGatherer::~UnitGatherer() {
  for (auto& u : units_) {
    if (u.work) {
      try {
        u.work->wait();
      } catch (...) {
      }
    }
  }
}

void UnitGatherer::bind_parameters(const std::vector<torch::Tensor>& params) {
  for (auto& unit : units_) {
    // Views are checked against their storage's size: a released unit gets its memory
    // (untouched, so no RSS) while its parameters become views of it.
    const bool released = unit.state == State::kReleased;
    if (released) allocate_storage(unit.whole->flat());
    unit.whole->bind_parameters(params);
    if (released) free_storage(unit.whole->flat());
  }
}

void UnitGatherer::fill_unit(size_t u, const torch::Tensor& values) {
  torch::NoGradGuard no_grad;
  auto& unit = units_[u];
  const auto& lu = layout_.units()[u];
  if (unit.state != State::kReleased) unit.whole->flat().copy_(values);
  pieces_->fill(u, values.narrow(0, comm_->rank() * lu.shard_size, lu.shard_size));
}

const std::vector<size_t>& UnitGatherer::units_of(const torch::nn::Module& module) const {
  auto it = module_units_.find(&module);
  return it == module_units_.end() ? kNoUnits : it->second;
}

size_t UnitGatherer::whole_bytes() const {
  size_t bytes = 0;
  for (const auto& u : units_) {
    if (u.state != State::kReleased) bytes += u.whole->bytes();
  }
  return bytes;
}

void UnitGatherer::gather_async(size_t u) {
  auto& unit = units_[u];
  if (unit.state != State::kReleased) return;
  attach_buffer(unit);
  unit.sending = pieces_->get(u);
  unit.work = comm_->all_gather(unit.sending, gather_target(u));
  unit.state = State::kGathering;
  if (!unit.persistent) {
    live_ += layout_.units()[u].padded_numel;
    peak_live_ = std::max(peak_live_, live_);
  }
}

torch::Tensor UnitGatherer::gather_target(size_t u) {
  auto& unit = units_[u];
  if (options_.transfer == nullptr) return unit.whole->flat();
  unit.landing = torch::empty({layout_.units()[u].padded_numel},
                              options_.host_options.dtype(unit.whole->flat().scalar_type()));
  return unit.landing;
}

void UnitGatherer::land(const std::vector<size_t>& units) {
  if (options_.transfer == nullptr) return;
  for (size_t u : units) options_.transfer->copy(units_[u].whole->flat(), units_[u].landing);
  options_.transfer->wait();  // the host buffers go; compute queued next reads the units
  for (size_t u : units) units_[u].landing = torch::Tensor();
}

void UnitGatherer::wait_whole(size_t u) {
  auto& unit = units_[u];
  if (unit.state == State::kReleased) gather_async(u);
  if (unit.state == State::kGathering) {
    auto work = std::move(unit.work);
    work->wait();
    finish_send(u);
    land({u});
    unit.state = State::kGathered;
  }
}

// The all-gather no longer reads the piece: it may leave memory.
void UnitGatherer::finish_send(size_t u) {
  units_[u].sending = torch::Tensor();
  pieces_->done(u);
}

void UnitGatherer::release(size_t u) {
  auto& unit = units_[u];
  if (unit.persistent || !unit.managed || unit.uses > 0) return;
  if (unit.state == State::kReleased) return;
  if (unit.state == State::kGathering) {
    auto work = std::move(unit.work);
    work->wait();  // Gloo still writes into the buffer
    finish_send(u);
    unit.landing = torch::Tensor();  // gathered, never used: nothing to copy
  }
  detach_buffer(unit);
  unit.state = State::kReleased;
  live_ -= layout_.units()[u].padded_numel;
}

// A released unit's buffer: a spare of its size if one is kept, else a new one.
void UnitGatherer::attach_buffer(Unit& unit) {
  const auto& flat = unit.whole->flat();
  const size_t bytes = bytes_of(flat);
  auto spare = spare_.take(bytes, bytes);
  if (!spare) {
    allocate_storage(flat);
    return;
  }
  auto* impl = flat.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(std::move(*spare));
  impl->set_nbytes(bytes);
}

// Keeps the buffer as a spare while they fit under their cap, else frees it.
void UnitGatherer::detach_buffer(Unit& unit) {
  const auto& flat = unit.whole->flat();
  const size_t bytes = bytes_of(flat);
  if (!own_mapped(flat) || !spare_.fits(bytes)) {
    free_storage(flat);
    return;
  }
  auto* impl = flat.storage().unsafeGetStorageImpl();
  spare_.keep(impl->set_data_ptr(at::DataPtr(nullptr, flat.device())), bytes);
  impl->set_nbytes(0);
}

// The trace position k units on from `pos` in the order the step runs them, or kNoPosition past
// its end. Backward runs the trace backwards to its start. Forward runs to its end and
// then, when backward follows (gradients on, outside an activation checkpoint too), on into
// backward: the last units first, the ones it needs next; without gradients (evaluation) into the
// next forward.
size_t UnitGatherer::lookahead(size_t pos, size_t k) const {
  const size_t n = trace_.size();
  if (in_backward_) return k <= pos ? pos - k : kNoPosition;
  if (pos + k < n) return pos + k;
  if (!backward_follows()) return k < n ? (pos + k) % n : kNoPosition;
  const size_t back = pos + k - n;  // steps into backward: 0 is the last unit
  return back < n ? n - 1 - back : kNoPosition;
}

// Whether the forward running now is one a backward follows: gradients on, or inside an
// activation checkpoint's forward (grad mode off there, on outside).
bool UnitGatherer::backward_follows() {
  return torch::GradMode::is_enabled() || in_checkpointed_forward();
}

// The last unit of a forward that a backward follows is the unit backward needs first: it stays
// whole across the turn (FSDP keeps its root's parameters so) instead of being released and
// gathered again at once from a piece read back from disk. Backward releases it when its
// gradients are out (unit_backward_done), end_backward at the latest.
bool UnitGatherer::kept_for_backward(size_t u) const {
  if (recording_ || trace_.empty() || trace_.back() != u || next_ != trace_.size()) return false;
  return backward_follows();
}

// Issues gathers for the units that come next from trace position `pos` (lookahead),
// within the prefetch budget and the live cap.
void UnitGatherer::prefetch(size_t pos) {
  if (options_.prefetch_elems <= 0 || recording_) return;
  int64_t ahead = 0;
  for (size_t k = 1;; ++k) {
    const size_t at = lookahead(pos, k);
    if (at == kNoPosition) break;
    const size_t v = trace_[at];
    auto& unit = units_[v];
    if (unit.state != State::kReleased || !unit.managed) continue;
    const int64_t size = layout_.units()[v].padded_numel;
    if (ahead + size > options_.prefetch_elems || live_ + size > options_.max_live_elems) {
      read_ahead(pos, k);
      break;
    }
    gather_async(v);
    ahead += size;
  }
}

// Pieces on disk: reads the pieces of the units after the gathered ones (lookahead steps
// k, k + 1, ... from `pos`) while the pieces' budget (max_in_cpu) lasts, so a gather finds
// its piece in memory.
void UnitGatherer::read_ahead(size_t pos, size_t from) {
  for (size_t k = from;; ++k) {
    const size_t at = lookahead(pos, k);
    if (at == kNoPosition) break;
    const size_t v = trace_[at];
    if (units_[v].state != State::kReleased || !units_[v].managed) continue;
    if (!pieces_->prefetch(v)) break;
  }
}

void UnitGatherer::prefetch_forward(size_t u) {
  if (recording_) {
    trace_.push_back(u);
    return;
  }
  if (trace_.empty()) return;
  // Find u at or after the expected position (the model may run units in another order
  // now and then, e.g. evaluation): no match means no prefetch.
  for (size_t k = 0; k < trace_.size(); ++k) {
    const size_t at = (next_ + k) % trace_.size();
    if (trace_[at] == u) {
      next_ = at + 1;
      prefetch(at);
      return;
    }
  }
}

void UnitGatherer::prefetch_backward(size_t u) {
  if (recording_ || trace_.empty()) return;
  for (size_t k = 0; k < trace_.size(); ++k) {
    const size_t at = (cursor_ + trace_.size() - k) % trace_.size();
    if (trace_[at] == u) {
      cursor_ = at;
      prefetch(at);
      return;
    }
  }
}

void UnitGatherer::before_forward(const torch::nn::Module& module) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  for (size_t u : units_of(module)) {
    auto& unit = units_[u];
    unit.managed = true;
    ++unit.uses;
    if (meter_ != nullptr && unit.counted_forward != meter_->epoch()) {
      unit.counted_forward = meter_->epoch();
      meter_->forward_unit();
    }
    wait_whole(u);
    if (!in_backward_) prefetch_forward(u);
  }
}

void UnitGatherer::after_forward(const torch::nn::Module& module) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  for (size_t u : units_of(module)) {
    --units_[u].uses;
    // A recomputation in backward keeps the unit whole until its gradients are out.
    if (!in_backward_ && !kept_for_backward(u)) release(u);
  }
}

void UnitGatherer::before_backward(const torch::nn::Module& module) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  ZOFF_CHECK_ARG(in_backward_,
                 "backward through a zoff unit outside engine.backward(): call "
                 "engine.backward(loss), not loss.backward()");
  for (size_t u : units_of(module)) {
    wait_whole(u);
    prefetch_backward(u);
  }
}

void UnitGatherer::with_whole(size_t u, const std::function<void()>& fn) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  auto& unit = units_.at(u);
  ++unit.uses;
  try {
    wait_whole(u);
    fn();
  } catch (...) {
    --unit.uses;
    throw;
  }
  --unit.uses;
  release(u);  // a no-op for units kept whole (persistent, or never run through with_unit)
}

void UnitGatherer::begin_backward() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  in_backward_ = true;
  cursor_ = trace_.empty() ? 0 : trace_.size() - 1;
}

void UnitGatherer::unit_backward_done(size_t u) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (meter_ != nullptr && units_[u].counted_backward != meter_->epoch()) {
    units_[u].counted_backward = meter_->epoch();
    meter_->backward_unit();
  }
  release(u);
}

void UnitGatherer::end_backward() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  in_backward_ = false;
  next_ = 0;
  for (size_t u = 0; u < units_.size(); ++u) release(u);
  spare_.clear();  // the optimizer step runs next: no unit buffer held through it
  pieces_->drop_spares();
  if (recording_) finish_first_step();
}

// The first backward ends the recording: units never run through with_unit stay whole.
void UnitGatherer::finish_first_step() {
  recording_ = false;
  peak_live_ = live_;  // the recording step starts with every unit whole: not counted
  std::vector<std::string> unmanaged;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u].managed) continue;
    if (!units_[u].persistent) {
      units_[u].persistent = true;
      live_ -= layout_.units()[u].padded_numel;
    }
    unmanaged.push_back(layout_.units()[u].name);
  }
  if (!unmanaged.empty() && comm_->rank() == 0) {
    std::string names;
    for (size_t i = 0; i < unmanaged.size() && i < 4; ++i) names += (i ? ", " : "") + unmanaged[i];
    if (unmanaged.size() > 4) names += ", ...";
    std::fprintf(stderr,
                 "zoff: note: stage 3: %zu of %zu units (%s) are not run through "
                 "zoff::unit_forward/with_unit, so they stay whole on every rank; mark them to "
                 "save their parameter memory (README, \"Units\")\n",
                 unmanaged.size(), units_.size(), names.c_str());
  }
}

void UnitGatherer::refresh_whole_units() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  std::vector<size_t> sent;
  std::vector<dist::WorkPtr> works;
  for (size_t u = 0; u < units_.size(); ++u) {
    auto& unit = units_[u];
    if (unit.state == State::kGathering) {
      unit.work->wait();
      finish_send(u);
    }
  }
  pieces_->invalidate();  // pieces read before the step hold the old values
  for (size_t u = 0; u < units_.size(); ++u) {
    auto& unit = units_[u];
    if (unit.state == State::kReleased) continue;
    unit.sending = pieces_->get(u);
    works.push_back(comm_->all_gather(unit.sending, gather_target(u)));
    sent.push_back(u);
    unit.state = State::kGathered;
    unit.work.reset();
  }
  // With a device, each unit lands as its gather ends and its host buffer goes at once,
  // not all of them kept until the last gather ends.
  for (size_t i = 0; i < sent.size(); ++i) {
    works[i]->wait();
    finish_send(sent[i]);
    land({sent[i]});
  }
}

}  // namespace zoff::engine
