// init_comm: joins the job, over shared memory when every rank is on this host, shared memory
// and Gloo when each of several hosts has several ranks, else over Gloo.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "zoff/core/error.h"
#include "zoff/dist/gloo_comm.h"
#include "zoff/dist/hierarchical_comm.h"
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

// Several hosts with several ranks each, numbered host by host (rank = host * L + local
// rank, L the same everywhere), every rank allowing shared memory: decided together.
bool hosts_share_memory(Comm& gloo, const WorldInfo& world, const CommOptions& options) {
  const int64_t locals = world.local_world_size;
  const bool mine = options.transport != Transport::kGloo && locals > 1 &&
                    world.world_size % locals == 0 && world.rank % locals == world.local_rank;
  // Sums of L and L^2 over the ranks: W * sum(L^2) == sum(L)^2 only when every L is the same,
  // so every rank reaches the same answer.
  auto votes = torch::tensor({int64_t{mine ? 1 : 0}, locals, locals * locals}, torch::kLong);
  gloo.all_reduce_sum(votes)->wait();
  const int64_t sum = votes[1].item<int64_t>();
  return votes[0].item<int64_t>() == world.world_size &&
         world.world_size * votes[2].item<int64_t>() == sum * sum;
}

// Shared memory within each host and Gloo between them, or nullptr (with the reason) when
// some host could not map its segment; every rank gets the same answer.
CommPtr connect_hierarchical(const std::shared_ptr<GlooComm>& gloo, const WorldInfo& world,
                             std::chrono::milliseconds timeout, const CommOptions& options,
                             std::string* why_not) {
  const int locals = world.local_world_size;
  const int host = world.rank / locals;
  std::vector<int> host_ranks, rail_ranks;
  for (int l = 0; l < locals; ++l) host_ranks.push_back(host * locals + l);
  for (int h = 0; h < world.hosts(); ++h) rail_ranks.push_back(h * locals + world.local_rank);
  auto local_gloo = gloo->subgroup(detail::concat("gloo within host ", host), host_ranks);
  std::shared_ptr<Comm> local =
      ShmComm::connect(local_gloo, timeout, options.shm_slot_bytes, why_not);
  auto everywhere = torch::tensor({local ? 1 : 0}, torch::kInt);
  gloo->all_reduce_sum(everywhere)->wait();
  if (everywhere.item<int>() != world.world_size) {
    if (local == nullptr) return nullptr;
    *why_not = "another host could not map its shared segment";
    return nullptr;
  }
  auto rail = gloo->subgroup(detail::concat("gloo between hosts, local rank ", world.local_rank),
                             rail_ranks);
  // Gloo's connect returns on a rank once its own pairs are up, while a peer may still be
  // connecting its other pairs: a rank that went on and closed its communicator (a short job, a
  // test) would end that peer's connect with "Connection closed by peer". Nobody returns until
  // every rail is connected.
  gloo->barrier();
  return std::make_shared<HierarchicalComm>(gloo, local, rail);
}

// Keeps `gloo` when the shared-memory transport `what` could not be had: an error naming why
// under ZOFF_COMM_TRANSPORT=shm, a note from rank 0 otherwise.
CommPtr keep_gloo(CommPtr gloo, const WorldInfo& world, const CommOptions& options,
                  const char* what, const std::string& why_not) {
  ZOFF_CHECK(options.transport != Transport::kShm, "ZOFF_COMM_TRANSPORT=shm: ", why_not);
  if (world.rank == 0) {
    std::fprintf(stderr, "zoff: %s unavailable (%s); using gloo\n", what, why_not.c_str());
  }
  return gloo;
}

}  // namespace

CommPtr init_comm(const WorldInfo& world, std::chrono::milliseconds timeout,
                  const CommOptions& options) {
  ZOFF_CHECK_ARG(timeout.count() > 0, "init_comm: timeout must be positive, got ", timeout.count(),
                 " ms");
  if (world.world_size == 1) return std::make_shared<SingleComm>();
  auto gloo = std::make_shared<GlooComm>(world, timeout);
  std::string why_not;
  if (!all_ranks_on_one_host(*gloo, world, options)) {
    if (!hosts_share_memory(*gloo, world, options)) {
      ZOFF_CHECK_ARG(options.transport != Transport::kShm,
                     "ZOFF_COMM_TRANSPORT=shm needs ranks that share a host, numbered host by "
                     "host, but LOCAL_WORLD_SIZE=",
                     world.local_world_size, " of WORLD_SIZE=", world.world_size,
                     " (or another rank chose gloo)");
      return gloo;
    }
    auto hierarchical = connect_hierarchical(gloo, world, timeout, options, &why_not);
    if (hierarchical) return hierarchical;
    return keep_gloo(gloo, world, options, "shared memory within hosts", why_not);
  }
  auto shm = ShmComm::connect(gloo, timeout, options.shm_slot_bytes, &why_not);
  if (shm) return shm;
  return keep_gloo(gloo, world, options, "shared-memory transport", why_not);
}

}  // namespace zoff::dist
