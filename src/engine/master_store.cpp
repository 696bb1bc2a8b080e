// MasterStore's defaults (what only some stores can do) and the one factory of stores.
#include "zoff/engine/master_store.h"

#include "zoff/core/error.h"
#include "zoff/placement/store_tier.h"

namespace zoff::engine {

std::unique_ptr<MasterStore> make_host_master_store(std::unique_ptr<offload::Tier> tier,
                                                    const MasterStoreOptions& options,
                                                    const optim::OptimizerOptions& optimizer);
std::unique_ptr<MasterStore> make_disk_master_store(std::unique_ptr<offload::Tier> tier,
                                                    const MasterStoreOptions& options,
                                                    const optim::OptimizerOptions& optimizer);

std::unique_ptr<MasterStore> make_master_store(const placement::StorePlace& place,
                                               const std::string& owner,
                                               const config::Config& config,
                                               const MasterStoreOptions& options) {
  auto tier = placement::make_tier(place, owner, placement::aio_options(config.aio));
  if (tier->is_host()) return make_host_master_store(std::move(tier), options, config.optimizer);
  return make_disk_master_store(std::move(tier), options, config.optimizer);
}

// What only a disk store can do: a store in memory is asked for it by mistake.
void MasterStore::step_scattered(const float*, double, optim::CopyOut,
                                 const optim::CopyOutPieces&) {
  throw Error("master store: a scattered step needs the master in memory");
}
void MasterStore::begin_step(const float*, double, const StepOutput&) {
  throw Error("master store: the overlapped step needs a disk store");
}
void MasterStore::grads_final(size_t, size_t) {
  throw Error("master store: the overlapped step needs a disk store");
}
void MasterStore::finish_step() {
  throw Error("master store: the overlapped step needs a disk store");
}
void MasterStore::abandon_step() {}
void MasterStore::bind_compute_copy(const torch::Tensor&) {
  throw Error("master store: this store keeps no split master");
}
void MasterStore::bind_compute_pieces(const optim::CopyOutPieces&) {
  throw Error("master store: a scattered split-master copy needs a host store");
}
double MasterStore::take_grads(size_t, const float*, size_t, bool, int) {
  throw Error("master store: gradients are kept by a disk store only");
}
void MasterStore::set_grad_scale(double) {
  throw Error("master store: gradients are kept by a disk store only");
}
void MasterStore::share_slices(dist::Comm&, int64_t) {
  throw Error("master store: stage 0 keeps its states in memory");
}

}  // namespace zoff::engine
