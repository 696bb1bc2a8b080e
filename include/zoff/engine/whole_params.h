// WholeParams: stages 0-2's whole compute parameters, one copy per rank or one per host, and
// how a rank's updated shard gets into them (an all-gather, or its own pieces in place).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "zoff/core/device_transfer.h"
#include "zoff/dist/comm.h"
#include "zoff/optim/copy_out_pieces.h"
#include "zoff/partition/flat_buffer.h"
#include "zoff/partition/model_layout.h"

namespace zoff::engine {

struct WholeParamsOptions {
  torch::ScalarType dtype = torch::kFloat32;  // the compute dtype
  torch::Device device = torch::kCPU;         // the compute device
  // Stages 1-2 on the CPU with several ranks (placement params_per_host): one copy mapped
  // by every rank of the host when the transport can share memory (Comm::shared_tensor);
  // else, with one line from rank 0 over shared memory, a copy per rank.
  bool per_host = false;
  // An accelerator: the host transports gather into `host_options` memory, then one copy
  // through `transfer` puts the parameters on the device.
  bool on_device = false;
  torch::TensorOptions host_options;
  DeviceTransfer* transfer = nullptr;
};

// The whole parameters in `layout`'s flat order (padded), compute dtype. Filled once unit by
// unit, bound to the module's parameters, then published into after every step. At stages
// 1-2 rank r owns elements [offset + r * shard_size, + shard_size) of every unit: its
// pieces, which its shard space holds in shard order.
class WholeParams {
 public:
  WholeParams(const partition::ModelLayout& layout, dist::CommPtr comm, WholeParamsOptions options);

  // One copy per host (each rank writes only its own pieces).
  bool shared() const { return shared_; }
  torch::Tensor flat() const { return params_->flat(); }
  // Setup: unit `u`'s values (`values`, fp32, the whole padded unit; `mine`, this rank's
  // piece), then bind() once every unit came: the module's parameters become views.
  void fill_unit(size_t u, const torch::Tensor& values, const torch::Tensor& mine);
  void bind(const std::vector<torch::Tensor>& trainable);

  // This rank's pieces of the shared copy, in shard order: where a fused pass can write.
  optim::CopyOutPieces own_pieces() const;
  // Brings `shard` (this rank's shard space, shard order; any dtype the buffer converts
  // from) into every rank's whole parameters: the pieces in place between two barriers
  // (shared), or an all-gather of every unit (shard in the compute dtype).
  void publish(const torch::Tensor& shard);

  size_t bytes() const { return params_->bytes(); }
  // The accelerator path's host copy, else 0.
  size_t host_bytes() const;

 private:
  void write_own_pieces(const torch::Tensor& shard);
  void all_gather_units(const torch::Tensor& shard);

  const partition::ModelLayout& layout_;
  dist::CommPtr comm_;
  WholeParamsOptions options_;
  std::unique_ptr<partition::FlatBuffer> params_;
  torch::Tensor host_params_;  // on_device: the all-gather's target
  bool shared_ = false;
};

}  // namespace zoff::engine
