// Runs one function per rank on its own thread, each rank with its own store client and Gloo group.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "zoff/dist/free_port.h"
#include "zoff/dist/world.h"

namespace zoff::dist::testing {

inline WorldInfo loopback_world(int rank, int world_size, int port) {
  WorldInfo world;
  world.rank = rank;
  world.world_size = world_size;
  world.local_rank = rank;
  world.local_world_size = world_size;
  world.master_addr = "127.0.0.1";
  world.master_port = port;
  return world;
}

// Calls fn(comm, rank) for every rank in `ranks` (default: all of 0..world_size-1), each on its
// own thread with a communicator from init_comm(options) on a fresh loopback port (options
// default to kAuto: shared memory, all ranks being threads of this process; `adjust` may change
// each rank's WorldInfo, e.g. to say it is on one of several hosts). Returns the
// exception each rank ended with (nullptr if none), indexed like `ranks`.
inline std::vector<std::exception_ptr> run_ranks(
    int world_size, std::chrono::milliseconds timeout, const std::function<void(Comm&, int)>& fn,
    std::vector<int> ranks = {}, CommOptions options = {},
    const std::function<void(WorldInfo&)>& adjust = {}) {
  if (ranks.empty()) {
    for (int r = 0; r < world_size; ++r) ranks.push_back(r);
  }
  const int port = pick_free_port();
  std::vector<std::exception_ptr> errors(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        auto world = loopback_world(ranks[i], world_size, port);
        if (adjust) adjust(world);
        auto comm = init_comm(world, timeout, options);
        fn(*comm, ranks[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// run_ranks for code that must not throw: any rank's exception fails the test.
inline void run_ranks_ok(int world_size, const std::function<void(Comm&, int)>& fn,
                         CommOptions options = {},
                         const std::function<void(WorldInfo&)>& adjust = {}) {
  auto errors = run_ranks(world_size, std::chrono::seconds(30), fn, {}, options, adjust);
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << " of " << world_size << " threw: " << e.what();
    }
  }
}

inline std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace zoff::dist::testing
