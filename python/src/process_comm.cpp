// process_comm: one rendezvous per process, on a port of its own.
#include "process_comm.h"

#include <cstdlib>
#include <mutex>
#include <string>

#include "zoff/core/error.h"

namespace zoff::python {

dist::WorldInfo python_world() {
  dist::WorldInfo world = dist::WorldInfo::from_env();
  if (const char* text = std::getenv("ZOFF_MASTER_PORT"); text != nullptr) {
    char* end = nullptr;
    const long port = std::strtol(text, &end, 10);
    ZOFF_CHECK_ARG(*text != '\0' && *end == '\0' && port >= 1 && port <= 65535,
                   "ZOFF_MASTER_PORT='", text, "' is not a port in [1, 65535]");
    world.master_port = static_cast<int>(port);
  } else {
    ZOFF_CHECK_ARG(world.master_port < 65535, "MASTER_PORT=", world.master_port,
                   ": zoff rendezvous on MASTER_PORT + 1; set ZOFF_MASTER_PORT instead");
    world.master_port += 1;
  }
  return world;
}

dist::CommPtr process_comm(std::chrono::milliseconds timeout) {
  static std::mutex mutex;
  // Never destroyed: tearing Gloo's pairs and threads down while the interpreter finalizes
  // races with it; process exit closes the sockets anyway.
  static auto* comm = new dist::CommPtr();
  std::lock_guard<std::mutex> lock(mutex);
  if (!*comm) *comm = dist::init_comm(python_world(), timeout);
  return *comm;
}

}  // namespace zoff::python
