// Where this process sits in the job: rank and world size from a torchrun-style environment.
#pragma once

#include <chrono>
#include <string>

#include "zoff/dist/comm.h"

namespace zoff::dist {

struct WorldInfo {
  int rank = 0;                           // RANK
  int world_size = 1;                     // WORLD_SIZE
  int local_rank = 0;                     // LOCAL_RANK
  int local_world_size = 1;               // LOCAL_WORLD_SIZE
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR
  int master_port = 29500;                // MASTER_PORT

  // Hosts the job spans: ranks are numbered host by host, LOCAL_WORLD_SIZE on each.
  int hosts() const { return world_size / local_world_size; }

  // Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; a
  // process with none of them set is rank 0 of 1. Malformed or inconsistent values
  // (RANK >= WORLD_SIZE, a port out of range, ...) throw zoff::UsageError naming them.
  static WorldInfo from_env();
};

// Throws zoff::UsageError "<label><host>: cannot be resolved (<reason>)", e.g. label
// "--master-addr " or "MASTER_ADDR=", when getaddrinfo does not know `host`: an unresolvable
// master address then fails at once instead of after the rendezvous timeout.
void check_resolvable(const std::string& label, const std::string& host);

// The local IPv4 address this host would use to reach host:port (no packet is sent: a UDP
// connect only picks a route), e.g. "10.77.1.2"; empty when `host` does not resolve. What
// Gloo binds and what the heartbeat reports a rank's host as.
std::string local_address_towards(const std::string& host, int port);

// How the ranks of a job talk once they have met.
enum class Transport {
  kAuto,  // shared memory when every rank is on one host, else Gloo (TCP)
  kShm,   // shared memory or an error
  kGloo,  // Gloo over TCP, even on one host
};

struct CommOptions {
  Transport transport = Transport::kAuto;
  int64_t shm_slot_bytes = int64_t{2} << 20;  // ShmComm::kDefaultSlotBytes

  // ZOFF_COMM_TRANSPORT = auto (the default), shm or gloo; anything else is a UsageError
  // naming the value.
  static CommOptions from_env();
};

// Joins the job: world size 1 gives a local communicator with no network; otherwise
// rendezvous through a c10d TCPStore at master_addr:master_port (rank 0 hosts it) and a
// ProcessGroupGloo, and then, when every rank says it is on this host (LOCAL_WORLD_SIZE ==
// WORLD_SIZE) and the transport allows, a ShmComm over it. If the shared segment cannot be
// mapped everywhere, kAuto keeps Gloo (rank 0 prints why on stderr) and kShm throws
// zoff::Error with the reason. Every wait, including the rendezvous, gives up after
// `timeout`; a master_addr that does not resolve is a UsageError at once (check_resolvable).
CommPtr init_comm(const WorldInfo& world, std::chrono::milliseconds timeout,
                  const CommOptions& options = CommOptions::from_env());

}  // namespace zoff::dist
