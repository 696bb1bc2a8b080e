// The offload tier behind a Store: the one place a Store value becomes a Tier object.
#pragma once

#include <memory>
#include <string>

#include "zoff/config/config.h"
#include "zoff/offload/aio_options.h"
#include "zoff/offload/tier.h"
#include "zoff/placement/placement.h"

namespace zoff::placement {

// The config's aio section as the NVMe tiers take it.
offload::AioOptions aio_options(const config::AioConfig& aio);

// A tier for `place` owned by `owner` ("zoff_rank0": names the files and the lock): host
// memory for kHost and for kCompute (states beside the parameters on the compute device,
// which the placement allows only on the CPU), the NVMe tier for kNvme, the striped one for
// kNvmeStriped.
std::unique_ptr<offload::Tier> make_tier(const StorePlace& place, const std::string& owner,
                                         const offload::AioOptions& aio);

}  // namespace zoff::placement
