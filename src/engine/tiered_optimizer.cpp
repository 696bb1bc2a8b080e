// TieredOptimizer: master and optimizer states in tier regions, stepped in pipelined sub-groups.
#include "zoff/engine/tiered_optimizer.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tiered_optimizer_impl.h"
#include "zoff/core/error.h"
#include "zoff/optim/gradient_kernels.h"
#include "zoff/optim/split_master.h"
#include "zoff/placement/stream_window.h"

namespace zoff::engine {

namespace {

size_t stored_element_bytes(const optim::OptimizerOptions& options) {
  return optim::stored_element_bytes(optim::parse_state_dtype(options.state_dtype));
}

// copy_divide_and_sum_squares over LibTorch's intra-op threads (backward's other thread idles
// while its main thread streams a piece): fixed chunks of 2^18 floats (1 MiB), whose squares
// are added in chunk order, so the sum does not depend on the thread count.
double copy_divide_squares_parallel(float* dst, const float* src, size_t n, float divisor) {
  constexpr size_t kChunk = size_t{1} << 18;
  const auto chunks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
  std::vector<double> squares(static_cast<size_t>(chunks));
  at::parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) {
      const size_t at = static_cast<size_t>(c) * kChunk;
      squares[static_cast<size_t>(c)] =
          optim::copy_divide_and_sum_squares(dst + at, src + at, std::min(kChunk, n - at), divisor);
    }
  });
  double total = 0;
  for (double s : squares) total += s;
  return total;
}

}  // namespace

TieredOptimizer::TieredOptimizer(offload::Tier& tier, const optim::OptimizerOptions& options,
                                 int threads, size_t numel, SubGroupOptions sub_groups)
    : tier_(tier),
      optimizer_(options, threads),
      state_bytes_(stored_element_bytes(options)),
      numel_(numel),
      split_(sub_groups.split_master),
      group_(optim::round_sub_group(sub_groups.sub_group_elems, tier.alignment(), numel,
                                    state_bytes_)),
      timeout_(sub_groups.timeout) {
  const size_t per_group = 1 + optimizer_.states().size();
  const int64_t count =
      sub_groups.buffer_count == 0 ? static_cast<int64_t>(3 * per_group) : sub_groups.buffer_count;
  ZOFF_CHECK_ARG(count >= static_cast<int64_t>(per_group),
                 "zero_optimization.offload_optimizer.buffer_count = ", count, ": ", options.type,
                 " needs at least ", per_group,
                 " (the master and each optimizer state of one sub-group)");
  regions_.push_back(tier_.allocate("master", numel_ * (split_ ? 2 : sizeof(float))));
  for (const auto& spec : optimizer_.states()) {
    regions_.push_back(tier_.allocate(spec.name, numel_ * state_bytes_));
    if (optimizer_.state_dtype() == optim::StateDtype::kInt8) {
      scales_.emplace_back(optim::state_blocks(numel_), 0.0f);
    }
  }
  const size_t bytes = static_cast<size_t>(group_) * sizeof(float);
  const bool grads = sub_groups.grads_in_tier;
  ZOFF_CHECK(!(grads && sub_groups.grads_streamed),
             "tiered optimizer: gradients both in the tier and streamed");
  if (grads) {
    grads_region_ = tier_.allocate("grads", numel_ * sizeof(float));
    // A window is one sub-group's span widened to whole blocks at both ends.
    grads_window_ = offload::HostBuffer(bytes + 2 * tier_.alignment(), tier_.alignment());
  }
  ZOFF_CHECK_ARG(count / static_cast<int64_t>(per_group) <= 64,
                 "zero_optimization.offload_optimizer.buffer_count = ", count,
                 ": at most 64 sub-groups' worth (", 64 * per_group, ")");
  for (int64_t s = 0; s < count / static_cast<int64_t>(per_group); ++s) {
    auto slot = std::make_unique<Slot>();
    for (size_t b = 0; b < per_group; ++b) {
      // The split master steps from the copy and the extensions: of the fp32 master
      // buffers only the first slot's is kept, the range copies' bounce (stream_range).
      const size_t elem = b > 0 ? state_bytes_ : (split_ && s > 0 ? 0 : sizeof(float));
      slot->buffers.emplace_back(static_cast<size_t>(group_) * elem, tier_.alignment());
    }
    if (grads) slot->grads = offload::HostBuffer(bytes, tier_.alignment());
    if (split_) slot->ext = offload::HostBuffer(static_cast<size_t>(group_) * 2, tier_.alignment());
    slots_.push_back(std::move(slot));
  }
  if (sub_groups.grads_streamed) {
    const int64_t buffers =
        sub_groups.stream_buffers > 0
            ? sub_groups.stream_buffers
            : placement::auto_stream_buffers(static_cast<int64_t>(slots_.size()), group_,
                                             sub_groups.stream_burst_elems);
    window_ = std::make_unique<GradWindow>(static_cast<size_t>(group_),
                                           static_cast<size_t>(buffers), timeout_);
    zeros_ = offload::HostBuffer(bytes, tier_.alignment());
  }
  fill_states();
  submitted_.assign(groups(), false);
  worker_ = std::thread([this] { worker_loop(); });
}

TieredOptimizer::~TieredOptimizer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    closing_ = true;
    queue_.clear();  // a step abandoned by an exception: update nothing more
  }
  wake_.notify_all();
  worker_.join();
}

size_t TieredOptimizer::groups() const {
  return (numel_ + static_cast<size_t>(group_) - 1) / static_cast<size_t>(group_);
}

size_t TieredOptimizer::stored_bytes(size_t region) const {
  return region == 0 && split_ ? 2 : region_element_bytes(region);
}

uint64_t TieredOptimizer::region_offset(size_t region, size_t g) const {
  return g * static_cast<uint64_t>(group_) * stored_bytes(region);
}

void* TieredOptimizer::region_buffer(Slot& slot, size_t region) {
  return region == 0 && split_ ? slot.ext.data() : slot.buffers[region].data();
}

size_t TieredOptimizer::group_size(size_t g) const {
  return std::min(static_cast<size_t>(group_), numel_ - g * static_cast<size_t>(group_));
}

// States whose initial value is not zero (Adagrad's initial accumulator) are written once;
// the tier's regions start zero-filled.
void TieredOptimizer::fill_states() {
  Slot& slot = *slots_.front();
  for (size_t i = 0; i < optimizer_.states().size(); ++i) {
    const float value = optimizer_.states()[i].initial;
    if (value == 0.0f) continue;
    float* buf = slot.buffers[1 + i].as<float>();  // non-zero initial values: fp32 states
    std::fill(buf, buf + group_, value);
    for (size_t g = 0; g < groups(); ++g) {
      const uint64_t at = g * static_cast<uint64_t>(group_) * sizeof(float);
      regions_[1 + i]->write(at, buf, group_size(g) * sizeof(float)).wait();
    }
  }
}

void TieredOptimizer::append_master(size_t offset, const float* values, size_t n) {
  ZOFF_CHECK(!job_.active, "tiered optimizer: append_master during a step");
  discard_prefetch();
  ZOFF_CHECK(offset == appended_, "tiered optimizer: master elements appended at ", offset,
             ", expected ", appended_, " (out of order)");
  ZOFF_CHECK(appended_ + n <= numel_, "tiered optimizer: ", appended_ + n,
             " master elements appended, the shard has ", numel_);
  Slot& slot = *slots_.front();
  auto* buf = static_cast<char*>(region_buffer(slot, 0));
  const size_t elem = stored_bytes(0);
  while (n > 0) {
    const size_t at = appended_ % static_cast<size_t>(group_);
    const size_t take = std::min(n, static_cast<size_t>(group_) - at);
    if (split_) {
      optim::split_master_extensions(values, take, reinterpret_cast<uint16_t*>(buf) + at,
                                     appended_);
    } else {
      std::memcpy(buf + at * elem, values, take * elem);
    }
    appended_ += take;
    values += take;
    n -= take;
    if (at + take == static_cast<size_t>(group_) || appended_ == numel_) {
      const size_t g = (appended_ - 1) / static_cast<size_t>(group_);
      regions_.front()->write(region_offset(0, g), buf, (at + take) * elem).wait();
    }
  }
}

void TieredOptimizer::finish_master() {
  ZOFF_CHECK(appended_ == numel_, "tiered optimizer: ", appended_,
             " master elements appended, the shard has ", numel_);
}

void TieredOptimizer::issue_read(size_t g, Slot& slot) {
  if (slot.prefetched != g) {
    {
      ScopedWait wait(meter_, StepMeter::Wait::kOptimizer);
      slot.wait();  // the write-back of the sub-group that used these buffers before
    }
    issue_state_reads(g, slot);
  }
  slot.prefetched = Slot::kNone;
  if (grads_region_) {
    const uint64_t offset = g * static_cast<uint64_t>(group_) * sizeof(float);
    slot.pending.push_back(
        grads_region_->read(offset, slot.grads.data(), group_size(g) * sizeof(float)));
  }
}

// Sub-group g's master (or extensions and copy) and states: everything of it the step reads
// but its gradients, which backward may still be writing.
void TieredOptimizer::issue_state_reads(size_t g, Slot& slot) {
  for (size_t r = 0; r < regions_.size(); ++r) {
    slot.pending.push_back(regions_[r]->read(region_offset(r, g), region_buffer(slot, r),
                                             group_size(g) * stored_bytes(r)));
  }
  if (split_ && out_region_ != nullptr) {  // the copy half of the split master
    slot.pending.push_back(out_region_->read(g * static_cast<uint64_t>(group_) * out_bytes_,
                                             slot.out.data(), group_size(g) * out_bytes_));
  }
}

void TieredOptimizer::prefetch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ZOFF_CHECK(!job_.active && !running_, "tiered optimizer: prefetch during a step");
  }
  // A step that is not overlapped takes sub-groups in order and finds each read-ahead in
  // whichever slot holds it: sub-group g < slots goes to slot g.
  const size_t n = std::min(groups(), slots_.size());
  for (size_t g = 0; g < n; ++g) {
    Slot& slot = *slots_[g];
    if (slot.prefetched == g) continue;  // still there (a step skipped since)
    slot.wait();
    issue_state_reads(g, slot);
    slot.prefetched = g;
  }
}

// What the slots hold is about to change (a range copy, the master's setup) or what was
// read ahead may be stale (a region rewritten): the reads in flight finish, nothing is kept.
void TieredOptimizer::discard_prefetch() {
  for (auto& slot : slots_) {
    slot->wait();
    slot->prefetched = Slot::kNone;
  }
}

void TieredOptimizer::update(size_t g, Slot& slot) {
  {
    ScopedWait wait(meter_, StepMeter::Wait::kOptimizer);
    slot.wait();  // this sub-group's reads
  }
  const float* grads = group_grads(g, slot);
  if (split_) {
    update_split(g, slot, grads);
  } else {
    update_fp32(g, slot, grads);
  }
  if (window_) window_->release(g);  // consumed: backward may fill another sub-group
  if (meter_ != nullptr) meter_->group_done();
}

// The states of sub-group g as the span kernels take them (int8: with their scales; a
// sub-group starts on a block boundary, optim::round_sub_group, so its first scale is
// begin / kStateBlock of the shard's).
std::vector<optim::StateSpan> TieredOptimizer::state_spans(size_t g, Slot& slot) {
  const size_t begin = g * static_cast<size_t>(group_);
  auto states = slot.states();
  std::vector<optim::StateSpan> spans;
  for (size_t i = 0; i < states.size(); ++i) {
    float* scales = scales_.empty() ? nullptr : scales_[i].data() + begin / optim::kStateBlock;
    spans.push_back({states[i], scales});
  }
  return spans;
}

// The split master: each chunk of the sub-group joined from the copy and the extensions,
// stepped and split again while it is in cache (optim::SpanOptimizer::step_split_span); no
// fp32 master buffer, and the copy is the new bf16 parameters.
void TieredOptimizer::update_split(size_t g, Slot& slot, const float* grads) {
  const size_t begin = g * static_cast<size_t>(group_);
  const auto spans = state_spans(g, slot);
  settled_ +=
      optimizer_.step_split_span(split_copy_of(g, slot), slot.ext.as<uint16_t>(), grads,
                                 spans.data(), group_size(g), optim::SpanPlace{begin, numel_});
}

// The fp32 master in the slot's buffer, stepped with the copy-out the step asked for.
void TieredOptimizer::update_fp32(size_t g, Slot& slot, const float* grads) {
  const size_t begin = g * static_cast<size_t>(group_);
  const size_t n = group_size(g);
  float* master = slot.buffers.front().as<float>();
  const bool copy = job_.copy_out != optim::CopyOut::kNone;
  const optim::CopyOut copy_out = copy ? job_.copy_out : optim::CopyOut::kNone;
  uint16_t* out16 = nullptr;
  if (copy) out16 = out_region_ != nullptr ? slot.out.as<uint16_t>() : job_.out16 + begin;
  if (state_bytes_ == sizeof(float)) {
    optimizer_.step_span(master, grads, slot.states().data(), n, copy_out, out16);
  } else {
    const auto spans = state_spans(g, slot);
    optimizer_.step_span(master, grads, spans.data(), n, optim::SpanPlace{begin, numel_}, copy_out,
                         out16);
  }
  if (out_region_ != nullptr && !copy) std::memcpy(slot.out.data(), master, n * sizeof(float));
  if (out_region_ == nullptr && job_.out32 != nullptr) {
    std::memcpy(job_.out32 + begin, master, n * sizeof(float));
  }
}

// Sub-group g's gradients for update(): in host memory, read from the tier with the
// master (scaled there when clipping), or the window's buffer (zeros when none came).
const float* TieredOptimizer::group_grads(size_t g, Slot& slot) {
  if (window_) {
    const float* streamed = window_->find(g);
    return streamed != nullptr ? streamed : zeros_.as<float>();
  }
  if (!grads_region_) return job_.grads + g * static_cast<size_t>(group_);
  if (grad_scale_ != 1.0) {  // clipping: the tensor multiply the in-memory path does
    torch::from_blob(slot.grads.data(), {static_cast<int64_t>(group_size(g))}, torch::kFloat32)
        .mul_(grad_scale_);
  }
  return slot.grads.as<float>();
}

void TieredOptimizer::issue_write(size_t g, Slot& slot) {
  for (size_t r = 0; r < regions_.size(); ++r) {
    slot.pending.push_back(regions_[r]->write(region_offset(r, g), region_buffer(slot, r),
                                              group_size(g) * stored_bytes(r)));
  }
  if (out_region_ != nullptr) {
    slot.pending.push_back(out_region_->write(g * static_cast<uint64_t>(group_) * out_bytes_,
                                              slot.out.data(), group_size(g) * out_bytes_));
  }
}

void TieredOptimizer::set_output_region(offload::TierRegion* region, size_t element_bytes) {
  ZOFF_CHECK(!job_.active, "tiered optimizer: output region changed during a step");
  ZOFF_CHECK(region == nullptr || element_bytes == 2 || element_bytes == 4,
             "tiered optimizer: output elements of ", element_bytes, " bytes");
  ZOFF_CHECK(region == nullptr || region->bytes() == numel_ * element_bytes,
             "tiered optimizer: output region of ", region ? region->bytes() : 0, " bytes for ",
             numel_, " elements");
  ZOFF_CHECK(!split_ || region == nullptr || element_bytes == 2,
             "tiered optimizer: the split master's copy is bf16, not ", element_bytes, " bytes");
  discard_prefetch();
  out_region_ = region;
  out_bytes_ = element_bytes;
  for (auto& slot : slots_) {
    slot->out = region == nullptr ? offload::HostBuffer()
                                  : offload::HostBuffer(static_cast<size_t>(group_) * element_bytes,
                                                        tier_.alignment());
  }
}

void TieredOptimizer::wait_all() {
  for (auto& slot : slots_) slot->wait();
}

void TieredOptimizer::check_regions() const {
  for (const auto& r : regions_) r->check();
}

void TieredOptimizer::step(const float* grads, double lr, optim::CopyOut copy_out, uint16_t* out16,
                           float* out32) {
  begin_step(grads, lr, copy_out, out16, out32);
  finish_step();
}

void TieredOptimizer::begin_step(const float* grads, double lr, optim::CopyOut copy_out,
                                 uint16_t* out16, float* out32) {
  ZOFF_CHECK(!job_.active, "tiered optimizer: begin_step during a step");
  ZOFF_CHECK(grads != nullptr || numel_ == 0 || grads_region_ || window_,
             "tiered optimizer: no gradients");
  ZOFF_CHECK(!split_ || copy_out == optim::CopyOut::kBf16,
             "tiered optimizer: the split master needs a bf16 copy-out");
  ZOFF_CHECK(!split_ || out_region_ != nullptr || (out16 != nullptr && out16 == split_copy_),
             "tiered optimizer: the split master's step must write the bound copy");
  check_regions();
  optimizer_.begin_step(lr);
  std::lock_guard<std::mutex> lock(mutex_);
  job_ = {grads, copy_out, out16, out32, true};
  submitted_.assign(groups(), false);
  final_elems_.assign(groups(), 0);
  if (window_) streamed_.assign(groups(), {});
  queue_.clear();
  closing_ = false;
  error_ = nullptr;
  running_ = true;
  wake_.notify_all();
}

void TieredOptimizer::submit(size_t g) {
  std::lock_guard<std::mutex> lock(mutex_);
  ZOFF_CHECK(job_.active && !closing_, "tiered optimizer: submit outside a step");
  ZOFF_CHECK(g < submitted_.size() && !submitted_[g], "tiered optimizer: sub-group ", g,
             " submitted twice or out of range (", submitted_.size(), " sub-groups)");
  submitted_[g] = true;
  queue_.push_back(g);
  wake_.notify_all();
}

void TieredOptimizer::grads_final(size_t offset, size_t n) {
  ZOFF_CHECK(!window_,
             "tiered optimizer: grads_final with streamed gradients (accumulate_grads "
             "submits each sub-group itself)");
  ZOFF_CHECK(offset + n <= numel_, "tiered optimizer: final range [", offset, ", ", offset + n,
             ") is outside ", numel_, " elements");
  const auto group = static_cast<size_t>(group_);
  for (size_t at = offset; at < offset + n;) {
    const size_t g = at / group;
    const size_t k = std::min(offset + n, (g + 1) * group) - at;
    final_elems_[g] += k;
    ZOFF_CHECK(final_elems_[g] <= group_size(g), "tiered optimizer: sub-group ", g,
               " made final twice");
    if (final_elems_[g] == group_size(g)) submit(g);
    at += k;
  }
}

void TieredOptimizer::abandon_step() {
  if (!job_.active) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    submitted_.assign(submitted_.size(), true);  // close_and_wait() adds nothing
  }
  const bool done = close_and_wait();
  if (done) discard_prefetch();
  optimizer_.abort_step();
  grad_scale_ = 1.0;
  ZOFF_CHECK(done, "tiered optimizer: an abandoned step did not stop within ", timeout_.count(),
             " ms");
}

void TieredOptimizer::finish_step() {
  ZOFF_CHECK(job_.active, "tiered optimizer: finish_step without begin_step");
  if (!close_and_wait()) {
    optimizer_.abort_step();
    throw Error("tiered optimizer: the step did not finish within " +
                std::to_string(timeout_.count()) + " ms (a wedged disk?)");
  }
  grad_scale_ = 1.0;
  if (error_) {
    optimizer_.abort_step();
    std::rethrow_exception(error_);
  }
  optimizer_.end_step();
}

void TieredOptimizer::set_grad_scale(double coef) {
  ZOFF_CHECK(grads_region_ && !job_.active,
             "tiered optimizer: set_grad_scale needs grads_in_tier, between steps");
  grad_scale_ = coef;
}

// Window by window (at most one sub-group each, widened to whole blocks): read what is
// there unless the window is all new values, add or copy the piece in, divide, write back.
double TieredOptimizer::accumulate_grads(size_t offset, const float* piece, size_t n, bool first,
                                         int divide_by) {
  if (window_) {
    ZOFF_CHECK(first, "tiered optimizer: streamed gradients cannot accumulate micro-batches");
    return stream_grads(offset, piece, n, divide_by);
  }
  ZOFF_CHECK(grads_region_, "tiered optimizer: accumulate_grads without grads_in_tier");
  ZOFF_CHECK(offset + n <= numel_, "tiered optimizer: gradient range [", offset, ", ", offset + n,
             ") is outside ", numel_, " elements");
  const size_t block = tier_.alignment() / sizeof(float);  // elements per aligned block
  auto* window = grads_window_.as<float>();
  const float divisor = divide_by > 1 ? static_cast<float>(divide_by) : 1.0f;  // 1: none
  double squares = 0;
  for (size_t done = 0; done < n;) {
    const size_t at = offset + done;
    const size_t k = std::min(n - done, static_cast<size_t>(group_));
    const size_t lo = at / block * block;
    const size_t hi = std::min(numel_, (at + k + block - 1) / block * block);
    const uint64_t bytes_at = lo * sizeof(float);
    const size_t bytes = (hi - lo) * sizeof(float);
    if (!(first && lo == at && hi == at + k)) grads_region_->read(bytes_at, window, bytes).wait();
    float* dest = window + (at - lo);
    if (first) {
      squares += copy_divide_squares_parallel(dest, piece + done, k, divisor);
    } else {
      auto sum = torch::from_blob(dest, {static_cast<int64_t>(k)}, torch::kFloat32);
      sum.add_(torch::from_blob(const_cast<float*>(piece + done), {static_cast<int64_t>(k)},
                                torch::kFloat32));
      squares += divide_by > 1 ? optim::divide_and_sum_squares(dest, k, divisor)
                               : optim::sum_squares(dest, k);
    }
    grads_region_->write(bytes_at, window, bytes).wait();
    done += k;
  }
  return squares;
}

// Sub-group by sub-group: the piece's values into the window buffer (divided like the
// in-memory path's tensor division), and the sub-group to the worker once all of its
// elements came. Waits (bounded) for a buffer when the window is full.
double TieredOptimizer::stream_grads(size_t offset, const float* piece, size_t n, int divide_by) {
  ZOFF_CHECK(job_.active, "tiered optimizer: streamed gradients outside a step");
  ZOFF_CHECK(offset + n <= numel_, "tiered optimizer: gradient range [", offset, ", ", offset + n,
             ") is outside ", numel_, " elements");
  const auto group = static_cast<size_t>(group_);
  const float divisor = divide_by > 1 ? static_cast<float>(divide_by) : 1.0f;  // 1: none
  double squares = 0;
  for (size_t done = 0; done < n;) {
    const size_t at = offset + done;
    const size_t g = at / group;
    const size_t k = std::min(n - done, (g + 1) * group - at);
    float* buffer = nullptr;
    {
      ScopedWait wait(meter_, StepMeter::Wait::kGradWindow);
      buffer = window_->acquire(g);
    }
    // One pass (the values the in-memory path's division gives, the squares in double).
    squares += copy_divide_squares_parallel(buffer + (at - g * group), piece + done, k, divisor);
    streamed_[g].emplace_back(at - g * group, at - g * group + k);
    final_elems_[g] += k;
    ZOFF_CHECK(final_elems_[g] <= group_size(g), "tiered optimizer: sub-group ", g,
               " got a gradient twice in one step");
    if (final_elems_[g] == group_size(g)) submit(g);
    done += k;
  }
  return squares;
}

// Streamed gradients: a sub-group that some of its elements' gradients never reached this
// step (a parameter no loss depended on) closes incomplete; its buffer's other elements are
// what the buffer's last sub-group left, so they are zeroed here, once, before the step takes
// it. Complete sub-groups were written whole and are not touched.
void TieredOptimizer::zero_unstreamed() {
  if (!window_) return;
  for (size_t g = 0; g < streamed_.size(); ++g) {
    if (streamed_[g].empty() || final_elems_[g] == group_size(g)) continue;
    float* buffer = window_->acquire(g);  // held since its first piece: no wait
    auto& ranges = streamed_[g];
    std::sort(ranges.begin(), ranges.end());
    size_t at = 0;
    for (const auto& [begin, end] : ranges) {
      if (begin > at) std::fill(buffer + at, buffer + begin, 0.0f);
      at = std::max(at, end);
    }
    std::fill(buffer + at, buffer + group_size(g), 0.0f);
  }
}

// Queues the sub-groups not submitted yet, closes the step and waits for the worker to
// finish it (at most timeout_). False on timeout.
bool TieredOptimizer::close_and_wait() {
  zero_unstreamed();
  std::unique_lock<std::mutex> lock(mutex_);
  for (size_t g = 0; g < submitted_.size(); ++g) {
    if (!submitted_[g]) queue_.push_back(g);
  }
  submitted_.assign(submitted_.size(), true);
  closing_ = true;
  wake_.notify_all();
  const bool done = finished_.wait_for(lock, timeout_, [&] { return !running_; });
  job_.active = false;
  if (window_ && done) window_->release_all();  // what an abandoned step left
  return done;
}

// The next submitted sub-group: false when the step is closing and none is left, or, when
// not `block`ing, when none is queued now.
bool TieredOptimizer::next_group(bool block, size_t* g) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (block) wake_.wait(lock, [&] { return !queue_.empty() || closing_; });
  if (queue_.empty()) return false;
  *g = queue_.front();
  queue_.pop_front();
  return true;
}

// What one step's pipeline knows of its sub-groups: which it took (in order) and which were
// read ahead, and where the guess in the last step's order stands.
struct TieredOptimizer::PipelineState {
  explicit PipelineState(size_t groups) : taken(groups, false), ahead(groups, false) {}
  std::vector<bool> taken;       // submitted and claimed this step (updated or about to be)
  std::vector<bool> ahead;       // read ahead into a slot this step
  std::vector<size_t> order;     // the sub-groups in the order this step took them
  size_t guess = 0;              // the next candidate in order_ for reading ahead
  Slot* last_written = nullptr;  // its write-back was issued last: still in flight
};

// The pipeline over sub-groups as they come: up to slots - 1 submitted sub-groups are read
// (or found read ahead) while the oldest is updated and written back; a slot neither taken
// nor just written reads ahead the next sub-group of the last step's order, so that the
// sub-group's master and states are there when its gradients become final.
void TieredOptimizer::run_pipeline() {
  const size_t ahead = std::max<size_t>(1, slots_.size() - 1);
  PipelineState st(groups());
  for (auto& slot : slots_) {  // read by prefetch() before the step
    if (slot->prefetched != Slot::kNone) st.ahead[slot->prefetched] = true;
  }
  std::deque<std::pair<size_t, Slot*>> reading;
  for (;;) {
    read_ahead(st);
    size_t g = 0;
    while (reading.size() < ahead && next_group(reading.empty(), &g)) {
      Slot* slot = claim_slot(g, st);
      issue_read(g, *slot);  // what was read ahead is used as it is
      slot->claimed = true;
      st.taken[g] = true;
      st.order.push_back(g);
      reading.emplace_back(g, slot);
    }
    if (reading.empty()) break;
    auto [next, slot] = reading.front();
    reading.pop_front();
    update(next, *slot);
    issue_write(next, *slot);
    slot->claimed = false;
    st.last_written = slot;
  }
  wait_all();
  // A finished step took every sub-group it read ahead; an abandoned one may not have.
  for (auto& slot : slots_) slot->prefetched = Slot::kNone;
  order_ = std::move(st.order);
}

// Into each free slot (not taken, not read ahead, not the one whose write-back was issued
// last): the master and states of the next sub-group in the last step's order that this
// step has neither taken nor read ahead. The slot's own write-back is waited for first.
void TieredOptimizer::read_ahead(PipelineState& st) {
  for (auto& s : slots_) {
    Slot& slot = *s;
    if (slot.claimed || slot.prefetched != Slot::kNone || &slot == st.last_written) continue;
    while (st.guess < order_.size() && (st.taken[order_[st.guess]] || st.ahead[order_[st.guess]])) {
      ++st.guess;
    }
    if (st.guess == order_.size()) return;
    const size_t g = order_[st.guess++];
    {
      ScopedWait wait(meter_, StepMeter::Wait::kOptimizer);
      slot.wait();
    }
    issue_state_reads(g, slot);
    slot.prefetched = g;
    st.ahead[g] = true;
  }
}

// The slot for submitted sub-group g: the one that read it ahead, else a free one (without
// a read-ahead first, then not the one just written), whose read-ahead is dropped.
TieredOptimizer::Slot* TieredOptimizer::claim_slot(size_t g, const PipelineState& st) {
  Slot* best = nullptr;
  int best_score = -1;
  for (auto& s : slots_) {
    if (s->prefetched == g) return s.get();
    if (s->claimed) continue;
    const int score = (s->prefetched == Slot::kNone ? 2 : 0) + (s.get() != st.last_written ? 1 : 0);
    if (score > best_score) {
      best = s.get();
      best_score = score;
    }
  }
  ZOFF_CHECK(best != nullptr, "tiered optimizer: no free buffer set for sub-group ", g);
  if (best->prefetched != Slot::kNone) {  // its reads finish, what they read is not used
    ScopedWait wait(meter_, StepMeter::Wait::kOptimizer);
    best->wait();
    best->prefetched = Slot::kNone;
  }
  return best;
}

void TieredOptimizer::worker_loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return running_ || stop_; });
      if (stop_ && !running_) return;
    }
    try {
      run_pipeline();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      queue_.clear();
      for (auto& slot : slots_) {
        slot->pending.clear();  // IoRequest's destructor waits
        slot->prefetched = Slot::kNone;
        slot->claimed = false;
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
    finished_.notify_all();
  }
}

std::vector<std::string> TieredOptimizer::region_names() const {
  std::vector<std::string> names;
  for (const auto& r : regions_) names.push_back(r->name());
  return names;
}

void TieredOptimizer::read(size_t region, size_t offset, size_t n, void* dst) {
  if (region == 0 && split_) return read_split_master(offset, n, static_cast<float*>(dst));
  stream_range(region, offset, n, false, [&](char* window, size_t bytes, size_t done) {
    std::memcpy(static_cast<char*>(dst) + done, window, bytes);
  });
}

void TieredOptimizer::write(size_t region, size_t offset, size_t n, const void* src) {
  if (region == 0 && split_) return write_split_master(offset, n, static_cast<const float*>(src));
  stream_range(region, offset, n, true, [&](char* window, size_t bytes, size_t done) {
    std::memcpy(window, static_cast<const char*>(src) + done, bytes);
  });
}

size_t TieredOptimizer::host_bytes() const {
  size_t bytes = 0;
  for (const auto& slot : slots_) {
    for (const auto& b : slot->buffers) bytes += b.capacity();
    bytes += slot->out.capacity() + slot->grads.capacity() + slot->ext.capacity();
  }
  for (const auto& s : scales_) bytes += s.size() * sizeof(float);
  if (window_) bytes += window_->capacity_bytes() + zeros_.capacity();
  return bytes + grads_window_.capacity();
}

size_t TieredOptimizer::scale_bytes() const {
  size_t bytes = 0;
  for (const auto& s : scales_) bytes += s.size() * sizeof(float);
  return bytes;
}

size_t TieredOptimizer::disk_bytes() const {
  size_t bytes = 0;
  for (const auto& r : regions_) bytes += r->bytes();
  return bytes;
}

size_t TieredOptimizer::grad_disk_bytes() const {
  return grads_region_ ? grads_region_->bytes() : 0;
}

size_t TieredOptimizer::state_disk_bytes() const {
  return disk_bytes() - regions_.front()->bytes();
}

}  // namespace zoff::engine
