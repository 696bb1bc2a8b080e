// make_tier: a Store value to its Tier object.
#include "zoff/placement/store_tier.h"

#include "zoff/core/error.h"

namespace zoff::placement {

offload::AioOptions aio_options(const config::AioConfig& a) {
  offload::AioOptions aio;
  aio.block_size = static_cast<size_t>(a.block_size);
  aio.queue_depth = static_cast<int>(a.queue_depth);
  aio.thread_count = static_cast<int>(a.thread_count);
  aio.single_submit = a.single_submit;
  aio.overlap_events = a.overlap_events;
  aio.backend = offload::parse_io_backend(a.backend);
  return aio;
}

std::unique_ptr<offload::Tier> make_tier(const StorePlace& place, const std::string& owner,
                                         const offload::AioOptions& aio) {
  switch (place.store) {
    case Store::kCompute:  // zoff's compute device, where states can live, is the CPU
    case Store::kHost:
      return offload::make_host_tier(/*lock=*/false);
    case Store::kNvme:
      ZOFF_CHECK_ARG(place.paths.size() == 1, "nvme store: ", place.paths.size(),
                     " directories, expected one");
      return offload::make_nvme_tier(place.paths.front(), owner, aio);
    case Store::kNvmeStriped:
      return offload::make_striped_nvme_tier(place.paths, owner, aio);
  }
  throw Error("make_tier: unknown store " + to_string(place.store));
}

}  // namespace zoff::placement
