// TieredOptimizer's split master: the extension region joined with the bf16 compute copy
// (in memory, or in the output region) into the fp32 master, and split back.

#include "tiered_optimizer_impl.h"
#include "zoff/core/error.h"
#include "zoff/engine/tiered_optimizer.h"
#include "zoff/optim/split_master.h"

namespace zoff::engine {

void TieredOptimizer::set_split_copy(uint16_t* copy) {
  ZOFF_CHECK(split_, "tiered optimizer: a split copy bound without the split master");
  ZOFF_CHECK(!job_.active, "tiered optimizer: split copy changed during a step");
  split_copy_ = copy;
}

// During a step: sub-group g's copy, read with the slot (output region) or in memory.
uint16_t* TieredOptimizer::split_copy_of(size_t g, Slot& slot) {
  if (out_region_ != nullptr) return slot.out.as<uint16_t>();
  return split_copy_ + g * static_cast<size_t>(group_);
}

uint16_t* TieredOptimizer::group_copy(size_t g, uint16_t* buffer) {
  ZOFF_CHECK(out_region_ != nullptr || split_copy_ != nullptr,
             "tiered optimizer: the split master's compute copy is not bound");
  if (out_region_ == nullptr) return split_copy_ + g * static_cast<size_t>(group_);
  out_region_->read(g * static_cast<uint64_t>(group_) * 2, buffer, group_size(g) * 2).wait();
  return buffer;
}

// The extension region window by window (stream_range), each window's copy beside it.
void TieredOptimizer::read_split_master(size_t offset, size_t n, float* dst) {
  uint16_t* buffer = out_region_ != nullptr ? slots_.front()->out.as<uint16_t>() : nullptr;
  stream_range(0, offset, n, false, [&](char* window, size_t bytes, size_t done) {
    const size_t at = offset + done / 2;
    const size_t g = at / static_cast<size_t>(group_);
    const uint16_t* copy = group_copy(g, buffer) + (at - g * static_cast<size_t>(group_));
    optim::split_master_decode(copy, reinterpret_cast<const uint16_t*>(window), bytes / 2,
                               dst + done / 2);
  });
}

// Settles each value, splits it into the window's extensions and the copy (read, changed
// and written back when it is in the output region).
void TieredOptimizer::write_split_master(size_t offset, size_t n, const float* src) {
  uint16_t* buffer = out_region_ != nullptr ? slots_.front()->out.as<uint16_t>() : nullptr;
  stream_range(0, offset, n, true, [&](char* window, size_t bytes, size_t done) {
    const size_t at = offset + done / 2;
    const size_t g = at / static_cast<size_t>(group_);
    uint16_t* group = group_copy(g, buffer);
    uint16_t* copy = group + (at - g * static_cast<size_t>(group_));
    optim::split_master_encode_from(src + done / 2, bytes / 2, copy,
                                    reinterpret_cast<uint16_t*>(window));
    if (out_region_ != nullptr) {
      out_region_->write(g * static_cast<uint64_t>(group_) * 2, group, group_size(g) * 2).wait();
    }
  });
}

}  // namespace zoff::engine
