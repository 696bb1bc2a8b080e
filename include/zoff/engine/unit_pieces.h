// Where a rank's pieces of the stage-3 units live: a tensor in memory, or a tier read on demand.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <memory>

#include "zoff/engine/step_meter.h"
#include "zoff/offload/host_buffer.h"
#include "zoff/offload/tier.h"
#include "zoff/partition/model_layout.h"

namespace zoff::engine {

// Unit u's piece on this rank is shard-space elements [shard_offset, + shard_size) of the
// layout's unit u, in the compute dtype. The gatherer asks for a piece to all-gather it,
// says when the gather no longer needs it, and names the units it will need next.
class UnitPieces {
 public:
  virtual ~UnitPieces() = default;
  // Unit u's piece, valid until done(u) (host memory: for its whole life). May wait for a
  // read.
  virtual torch::Tensor get(size_t u) = 0;
  virtual void done(size_t u) = 0;
  // Starts bringing u's piece in; false when the read-ahead budget is used up (nothing
  // was started), true otherwise (also when it is in memory already).
  virtual bool prefetch(size_t u) = 0;
  // The values behind the pieces changed (an optimizer step, a restore): forget every
  // piece read so far. Not while an all-gather reads one.
  virtual void invalidate() = 0;
  // Setup, every unit in order: u's values.
  virtual void fill(size_t u, const torch::Tensor& piece) = 0;
  virtual void finish_fill() = 0;
  // Bytes of pieces in host memory now, and the most so far.
  virtual size_t resident_bytes() const = 0;
  virtual size_t peak_resident_bytes() const = 0;
  // Buffers of pieces done, kept for the next reads (a tier's: with the pieces in memory, at
  // most the read-ahead's budget), and dropping them (before the optimizer step, which reads
  // nothing; a tier's keeping them between steps does not drop them).
  virtual size_t spare_bytes() const { return 0; }
  virtual void drop_spares() {}
};

// Pieces as views of `shard_space` (the in-memory stages 1-3 layout): always resident.
std::unique_ptr<UnitPieces> make_host_unit_pieces(const partition::ModelLayout& layout,
                                                  torch::Tensor shard_space);

// Pieces in `region` (shard-space order, compute dtype, layout.shard_size() elements) of
// a tier with the given alignment, read into host buffers when needed (the buffers of
// pieces done are reused, so their pages are not faulted in and zeroed by the kernel for
// every read): at most `max_in_cpu` elements read ahead (offload_param.max_in_cpu), and
// pieces and kept buffers together within that budget (or the two largest pieces'); a
// piece asked for now is read whatever the budget. With `keep_between_steps` the kept
// buffers stay from one step to the next (drop_spares() keeps them): for runs not short of
// memory, where a step's reads would otherwise fault in every piece's pages again.
// `region` must outlive the pieces. Waits for a read are added to `meter` (when not null)
// as parameter I/O.
std::unique_ptr<UnitPieces> make_tier_unit_pieces(const partition::ModelLayout& layout,
                                                  offload::TierRegion& region, size_t alignment,
                                                  torch::ScalarType dtype, int64_t max_in_cpu,
                                                  StepMeter* meter = nullptr,
                                                  bool keep_between_steps = false);

}  // namespace zoff::engine
