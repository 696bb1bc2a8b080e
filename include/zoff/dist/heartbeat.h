// Finds a stopped or wedged rank within a bounded time: each rank beats through the rendezvous
// store.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "zoff/dist/world.h"

namespace zoff::dist {

struct HeartbeatOptions {
  // A rank whose heartbeat has not advanced for this long fails the run. Must be >= 1 ms; it
  // bounds how long a SIGSTOPped or wedged rank goes unnoticed (the collectives would only
  // give up after their own, longer timeout).
  std::chrono::milliseconds timeout{60000};
  // Called once, on a heartbeat thread, with a one-line message naming the silent rank, e.g.
  // "rank 1 (on 10.0.0.2) sent no heartbeat for 30 s (stopped, wedged or cut off?)". Empty (the
  // default): write "zoff: error: <message>" to stderr and end the process with exit code 1 at
  // once. A collective blocked on a stopped peer cannot be cancelled in c10d's Gloo (its worker
  // threads sit in a socket read for the collective timeout), so a clean unwind would hang.
  std::function<void(const std::string&)> on_silence;
};

// One background thread per rank adds 1 to the store key zoff/heartbeat/<rank> every
// timeout / 5 (at least 50 ms, at most 5 s) through a store client of its own (it never
// shares a connection with the collectives). Rank 0 also reads every other rank's key and
// reports a rank whose count has not moved for `timeout`. Rank 0 hosts the store, so a
// stopped rank 0 shows on the other ranks as a store that no longer answers: a second
// thread reports that ("rank 0 (host of the store at A:P) did not answer for N s ...").
// Rank 0's messages name the silent rank's address (each rank records the address it reaches
// the store from). A rank whose Heartbeat was destroyed has finished (its key
// zoff/heartbeat_done/<rank> says so) and is not reported. A store that closed its connection
// means rank 0 has ended: on one host the launcher sees that and stops the others, so the
// watching ends quietly; on several hosts (LOCAL_WORLD_SIZE < WORLD_SIZE) a rank still running
// `timeout` later reports it ("rank 0 (...) ended the job: its store closed ..."), since it
// may be waiting in a collective on a host that is gone. Destroy the Heartbeat when the
// rank's own work is done.
class Heartbeat {
 public:
  // Connects to the store at world.master_addr:master_port (hosted by rank 0's GlooComm, so
  // create this after init_comm) and starts beating. Throws zoff::Error naming the address
  // when the store cannot be reached within options.timeout (at least 5 s).
  Heartbeat(const WorldInfo& world, HeartbeatOptions options);
  // Marks this rank finished and stops the threads (waits at most about one interval for a
  // store call in flight, then leaves it behind).
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  struct State;  // store client and what the threads share; see heartbeat.cpp

 private:
  std::shared_ptr<State> state_;  // shared with the threads (one may outlive this object)
  std::thread beater_;            // beats; on rank 0 also reads the other ranks' beats
  std::thread store_watcher_;     // ranks != 0: notices a store (rank 0) that stopped answering
};

}  // namespace zoff::dist
