// The one zoff communicator of a Python process, and the rendezvous port it uses.
#pragma once

#include <chrono>

#include "zoff/dist/comm.h"
#include "zoff/dist/world.h"

namespace zoff::python {

// torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...; `zoff launch` sets
// them), with the rendezvous port moved off MASTER_PORT: a user's own
// torch.distributed.init_process_group("env://") hosts its TCPStore on MASTER_PORT, before
// or after zoff, so zoff's store takes ZOFF_MASTER_PORT when set, else MASTER_PORT + 1.
dist::WorldInfo python_world();

// Rendezvous on the first call (every rank must make it); later calls, from every engine of
// the process, return the same communicator. `timeout` bounds every collective.
dist::CommPtr process_comm(std::chrono::milliseconds timeout);

}  // namespace zoff::python
