// init_comm: joins the job, over shared memory when every rank is on this host, else over Gloo.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "zoff/core/error.h"
#include "zoff/dist/gloo_comm.h"
#include "zoff/dist/shm_comm.h"
#include "zoff/dist/single_comm.h"
#include "zoff/dist/world.h"

namespace zoff::dist {

CommOptions CommOptions::from_env() {
  CommOptions options;
  const char* value = std::getenv("ZOFF_COMM_TRANSPORT");
  const std::string text = value == nullptr ? "auto" : value;
  if (text == "auto") return options;
  ZOFF_CHECK_ARG(text == "shm" || text == "gloo", "ZOFF_COMM_TRANSPORT='", text,
                 "' must be auto, shm or gloo");
  options.transport = text == "shm" ? Transport::kShm : Transport::kGloo;
  return options;
}

namespace {

// Whether every rank wants shared memory and says it shares this host. Decided together, so
// that a rank with a different environment cannot leave the others waiting in a rendezvous.
bool all_ranks_on_one_host(Comm& gloo, const WorldInfo& world, const CommOptions& options) {
  const bool mine =
      options.transport != Transport::kGloo && world.local_world_size == world.world_size;
  auto votes = torch::tensor({mine ? 1 : 0}, torch::kInt);
  gloo.all_reduce_sum(votes)->wait();
  return votes.item<int>() == world.world_size;
}

}  // namespace

CommPtr init_comm(const WorldInfo& world, std::chrono::milliseconds timeout,
                  const CommOptions& options) {
  ZOFF_CHECK_ARG(timeout.count() > 0, "init_comm: timeout must be positive, got ", timeout.count(),
                 " ms");
  if (world.world_size == 1) return std::make_shared<SingleComm>();
  auto gloo = std::make_shared<GlooComm>(world, timeout);
  if (!all_ranks_on_one_host(*gloo, world, options)) {
    ZOFF_CHECK_ARG(options.transport != Transport::kShm,
                   "ZOFF_COMM_TRANSPORT=shm needs every rank on one host, but LOCAL_WORLD_SIZE=",
                   world.local_world_size, " of WORLD_SIZE=", world.world_size,
                   " (or another rank chose gloo)");
    return gloo;
  }
  std::string why_not;
  auto shm = ShmComm::connect(gloo, timeout, options.shm_slot_bytes, &why_not);
  if (shm) return shm;
  ZOFF_CHECK(options.transport != Transport::kShm, "ZOFF_COMM_TRANSPORT=shm: ", why_not);
  if (world.rank == 0) {
    std::fprintf(stderr, "zoff: shared-memory transport unavailable (%s); using gloo\n",
                 why_not.c_str());
  }
  return gloo;
}

}  // namespace zoff::dist
