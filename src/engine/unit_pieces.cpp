// make_host_unit_pieces: the stage-3 pieces as views of a host shard space.
#include "zoff/engine/unit_pieces.h"

namespace zoff::engine {
namespace {

class HostUnitPieces final : public UnitPieces {
 public:
  HostUnitPieces(const partition::ModelLayout& layout, torch::Tensor shard_space)
      : layout_(layout), shard_space_(std::move(shard_space)) {}

  torch::Tensor get(size_t u) override {
    const auto& unit = layout_.units()[u];
    return shard_space_.narrow(0, unit.shard_offset, unit.shard_size);
  }
  void done(size_t) override {}
  bool prefetch(size_t) override { return true; }
  void invalidate() override {}
  void fill(size_t u, const torch::Tensor& piece) override {
    torch::NoGradGuard no_grad;
    get(u).copy_(piece);
  }
  void finish_fill() override {}
  size_t resident_bytes() const override { return static_cast<size_t>(shard_space_.nbytes()); }
  size_t peak_resident_bytes() const override { return resident_bytes(); }

 private:
  const partition::ModelLayout& layout_;
  torch::Tensor shard_space_;
};

}  // namespace

std::unique_ptr<UnitPieces> make_host_unit_pieces(const partition::ModelLayout& layout,
                                                  torch::Tensor shard_space) {
  return std::make_unique<HostUnitPieces>(layout, std::move(shard_space));
}

}  // namespace zoff::engine
