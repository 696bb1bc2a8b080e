// WholeParams: the whole compute parameters of stages 0-2, filled, bound and published into.
#include "zoff/engine/whole_params.h"

#include <cstdio>

namespace zoff::engine {

// At stages 1-2 with every rank on this host, one copy mapped by all of them when the
// transport can share memory: each rank writes its own pieces and reads the others' in
// place (no all-gather), and the host holds the parameters once. Stage 0 keeps a copy per
// rank (each rank updates all of it).
WholeParams::WholeParams(const partition::ModelLayout& layout, dist::CommPtr comm,
                         WholeParamsOptions options)
    : layout_(layout), comm_(std::move(comm)), options_(std::move(options)) {
  if (options_.per_host) {
    std::string why_not;
    auto shared = comm_->shared_tensor(layout_.padded_numel(), options_.dtype, &why_not);
    if (shared.defined()) {
      params_ = std::make_unique<partition::FlatBuffer>(layout_.slots(), std::move(shared));
      shared_ = true;
      return;
    }
    if (comm_->rank() == 0 && comm_->backend() == "shm") {
      std::fprintf(stderr,
                   "zoff: one copy of the parameters per host is not possible (%s): "
                   "each rank keeps its own\n",
                   why_not.c_str());
    }
  }
  params_ = std::make_unique<partition::FlatBuffer>(layout_.slots(), layout_.padded_numel(),
                                                    options_.dtype, options_.device);
  // The all-gather's target on an accelerator: the host transports gather in host memory.
  if (options_.on_device) {
    host_params_ = torch::zeros({layout_.padded_numel()}, options_.host_options);
  }
}

void WholeParams::fill_unit(size_t u, const torch::Tensor& values, const torch::Tensor& mine) {
  const auto& unit = layout_.units()[u];
  if (shared_) {  // the other pieces are the other ranks' to write
    params_->range(unit.piece_offset(comm_->rank()), unit.shard_size).copy_(mine);
  } else {
    params_->range(unit.offset, unit.padded_numel).copy_(values);
  }
}

void WholeParams::bind(const std::vector<torch::Tensor>& trainable) {
  if (shared_) comm_->barrier();  // every rank's pieces are written
  params_->bind_parameters(trainable);
}

optim::CopyOutPieces WholeParams::own_pieces() const {
  const int64_t rank = comm_->rank();
  auto* base = reinterpret_cast<uint16_t*>(params_->flat().data_ptr());
  std::vector<optim::CopyOutPiece> pieces;
  // Shard offsets increase along the buffer order.
  for (size_t u : layout_.buffer_order()) {
    const auto& unit = layout_.units()[u];
    pieces.push_back({static_cast<size_t>(unit.shard_offset), static_cast<size_t>(unit.shard_size),
                      base + unit.piece_offset(rank)});
  }
  return optim::CopyOutPieces(std::move(pieces), static_cast<size_t>(layout_.shard_size()));
}

void WholeParams::publish(const torch::Tensor& shard) {
  if (shared_) {
    write_own_pieces(shard);
  } else {
    all_gather_units(shard);
  }
}

// This rank's pieces of every unit from `shard` into the shared parameters. The first
// barrier waits until no rank reads the parameters any more (a peer may still be between
// its backward and its step), the second until every rank has written (the next forward
// reads all pieces).
void WholeParams::write_own_pieces(const torch::Tensor& shard) {
  const int64_t rank = comm_->rank();
  comm_->barrier();
  for (size_t u : layout_.buffer_order()) {
    const auto& unit = layout_.units()[u];
    params_->range(unit.piece_offset(rank), unit.shard_size)
        .copy_(shard.narrow(0, unit.shard_offset, unit.shard_size));
  }
  comm_->barrier();
}

// Every unit's pieces from every rank into the whole parameters. All gathers are issued
// before the first wait, so Gloo pipelines them. On an accelerator: gathered in host
// memory, then copied to the device in one piece.
void WholeParams::all_gather_units(const torch::Tensor& shard) {
  const torch::Tensor whole = options_.on_device ? host_params_ : params_->flat();
  std::vector<dist::WorkPtr> works;
  for (size_t u : layout_.buffer_order()) {
    const auto& unit = layout_.units()[u];
    works.push_back(comm_->all_gather(shard.narrow(0, unit.shard_offset, unit.shard_size),
                                      whole.narrow(0, unit.offset, unit.padded_numel)));
  }
  for (auto& w : works) w->wait();
  if (options_.on_device) {
    options_.transfer->copy(params_->flat(), host_params_);
    options_.transfer->wait();
  }
}

size_t WholeParams::host_bytes() const {
  return host_params_.defined() ? static_cast<size_t>(host_params_.nbytes()) : 0;
}

}  // namespace zoff::engine
