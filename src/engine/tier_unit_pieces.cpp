// make_tier_unit_pieces: stage-3 pieces kept in a tier region (NVMe) and read ahead of use.
#include <algorithm>
#include <utility>
#include <vector>

#include "zoff/core/error.h"
#include "zoff/core/round_up.h"
#include "zoff/engine/spare_buffers.h"
#include "zoff/engine/unit_pieces.h"

namespace zoff::engine {
namespace {

// Bytes of the staging buffer that setup's pieces are appended through.
constexpr size_t kFillChunkBytes = size_t{4} << 20;

class TierUnitPieces final : public UnitPieces {
 public:
  TierUnitPieces(const partition::ModelLayout& layout, offload::TierRegion& region,
                 size_t alignment, torch::ScalarType dtype, int64_t max_in_cpu, StepMeter* meter,
                 bool keep_between_steps)
      : layout_(layout),
        region_(region),
        alignment_(alignment),
        dtype_(dtype),
        element_bytes_(c10::elementSize(dtype)),
        max_in_cpu_(max_in_cpu),
        pieces_(layout.units().size()),
        staging_(kFillChunkBytes, alignment),
        meter_(meter),
        keep_between_steps_(keep_between_steps) {
    TwoLargest largest;
    for (size_t u = 0; u < pieces_.size(); ++u) {
      const auto [first, last] = read_span(u);
      largest.add(last - first);
    }
    // The read-ahead's budget: pieces in memory and spares together stay within it (the
    // two largest pieces' when max_in_cpu is smaller).
    const auto ahead = static_cast<size_t>(std::max<int64_t>(max_in_cpu, 0)) * element_bytes_;
    budget_ = std::max(largest.sum(), ahead);
    spares_.set_cap(budget_);
  }

  torch::Tensor get(size_t u) override {
    Piece& p = pieces_[u];
    if (!p.started) start_read(u);
    {
      ScopedWait wait(meter_, StepMeter::Wait::kParams);
      p.read.wait();
    }
    return p.view;
  }

  void done(size_t u) override {
    Piece& p = pieces_[u];
    if (!p.started) return;
    p.read.wait();
    resident_ -= bytes_of(u);
    keep_spare(std::move(p.buffer));
    p = Piece();
  }

  void drop_spares() override {
    if (!keep_between_steps_) spares_.clear();
  }

  bool prefetch(size_t u) override {
    if (pieces_[u].started) return true;
    const auto elems = static_cast<int64_t>(layout_.units()[u].shard_size);
    if (static_cast<int64_t>(resident_ / element_bytes_) + elems > max_in_cpu_) return false;
    start_read(u);
    return true;
  }

  void invalidate() override {
    for (size_t u = 0; u < pieces_.size(); ++u) done(u);
  }

  void fill(size_t u, const torch::Tensor& piece) override {
    const auto& unit = layout_.units()[u];
    ZOFF_CHECK(static_cast<size_t>(unit.shard_offset) * element_bytes_ == filled_,
               "unit pieces: unit ", u, " filled out of order");
    // Converted into the staging chunk slice by slice: no temporary the size of the piece
    // (a whole unit at world 1), which would stay behind in the heap after setup.
    torch::NoGradGuard no_grad;
    const auto src = piece.reshape({-1});
    const int64_t n = src.numel();
    for (int64_t done = 0; done < n;) {
      const size_t at = filled_ % kFillChunkBytes;
      const int64_t take =
          std::min(n - done, static_cast<int64_t>((kFillChunkBytes - at) / element_bytes_));
      torch::from_blob(staging_.as<char>() + at, {take}, torch::TensorOptions().dtype(dtype_))
          .copy_(src.narrow(0, done, take));
      done += take;
      filled_ += static_cast<size_t>(take) * element_bytes_;
      if (filled_ % kFillChunkBytes == 0) flush(kFillChunkBytes);
    }
  }

  void finish_fill() override {
    ZOFF_CHECK(filled_ == region_.bytes(), "unit pieces: ", filled_, " of ", region_.bytes(),
               " bytes filled");
    if (filled_ % kFillChunkBytes != 0) flush(filled_ % kFillChunkBytes);
    staging_ = offload::HostBuffer();  // setup is over
  }

  size_t resident_bytes() const override { return resident_; }
  size_t spare_bytes() const override { return spares_.bytes(); }
  size_t peak_resident_bytes() const override { return peak_; }

 private:
  struct Piece {
    bool started = false;
    offload::HostBuffer buffer;  // the aligned blocks around the piece
    offload::IoRequest read;
    torch::Tensor view;  // the piece inside buffer
  };

  size_t bytes_of(size_t u) const {
    return static_cast<size_t>(layout_.units()[u].shard_size) * element_bytes_;
  }

  void flush(size_t bytes) {
    const uint64_t offset = round_down(filled_ - 1, kFillChunkBytes);
    region_.write(offset, staging_.data(), bytes).wait();
  }

  // The region's aligned blocks [first, last) that hold unit u's piece (a few KiB more).
  std::pair<size_t, size_t> read_span(size_t u) const {
    const size_t begin = static_cast<size_t>(layout_.units()[u].shard_offset) * element_bytes_;
    const size_t end = begin + bytes_of(u);
    return {round_down(begin, alignment_), std::min(round_up(end, alignment_), region_.bytes())};
  }

  // A read buffer of `bytes`: a spare of that size or at most two blocks more (the pieces of
  // equal units straddle their blocks differently), else a new one (pages faulted in anew).
  // Spares are kept by capacity, a multiple of the alignment. A new one first frees spares
  // (of other sizes) until the pieces, the spares and it fit in the budget.
  offload::HostBuffer take_buffer(size_t bytes) {
    auto spare = spares_.take(round_up(bytes, alignment_), bytes + 2 * alignment_);
    if (spare) return std::move(*spare);
    while (resident_ + spares_.bytes() + round_up(bytes, alignment_) > budget_ &&
           spares_.drop_oldest()) {
    }
    return offload::HostBuffer(bytes, alignment_);
  }

  // A read buffer no longer needed: kept while the spares and the pieces in memory fit in
  // the budget, so the read-ahead finds its buffers faulted in already.
  void keep_spare(offload::HostBuffer buffer) {
    const size_t bytes = buffer.capacity();
    if (spares_.fits(bytes) && spares_.bytes() + bytes + resident_ <= budget_) {
      spares_.keep(std::move(buffer), bytes);
    }
  }

  // Reads the aligned blocks that hold unit u's piece, into a spare buffer when one fits.
  void start_read(size_t u) {
    const auto& unit = layout_.units()[u];
    const size_t begin = static_cast<size_t>(unit.shard_offset) * element_bytes_;
    const auto [first, last] = read_span(u);
    Piece& p = pieces_[u];
    p.started = true;
    p.buffer = take_buffer(std::max<size_t>(last - first, 1));
    if (last > first) p.read = region_.read(first, p.buffer.data(), last - first);
    p.view = torch::from_blob(p.buffer.as<char>() + (begin - first), {unit.shard_size},
                              torch::TensorOptions().dtype(dtype_));
    resident_ += bytes_of(u);
    peak_ = std::max(peak_, resident_);
  }

  const partition::ModelLayout& layout_;
  offload::TierRegion& region_;
  size_t alignment_;
  torch::ScalarType dtype_;
  size_t element_bytes_;
  int64_t max_in_cpu_;
  std::vector<Piece> pieces_;
  offload::HostBuffer staging_;
  StepMeter* meter_ = nullptr;  // where waits for a read go (may be null)
  // Read buffers of pieces done, for the next reads: with the pieces in memory, at most
  // budget_ bytes; kept from one step to the next with keep_between_steps_.
  SpareBuffers<offload::HostBuffer> spares_;
  size_t budget_ = 0;
  bool keep_between_steps_ = false;
  size_t filled_ = 0;  // bytes appended by fill()
  size_t resident_ = 0;
  size_t peak_ = 0;
};

}  // namespace

std::unique_ptr<UnitPieces> make_tier_unit_pieces(const partition::ModelLayout& layout,
                                                  offload::TierRegion& region, size_t alignment,
                                                  torch::ScalarType dtype, int64_t max_in_cpu,
                                                  StepMeter* meter, bool keep_between_steps) {
  return std::make_unique<TierUnitPieces>(layout, region, alignment, dtype, max_in_cpu, meter,
                                          keep_between_steps);
}

}  // namespace zoff::engine
