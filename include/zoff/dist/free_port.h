// Asking the kernel for a TCP port nobody is listening on, for a rendezvous on one node.
#pragma once

namespace zoff::dist {

// Binds a TCP socket to port 0 on all IPv4 interfaces, reads the port the kernel chose and
// closes the socket. The port is free now, not reserved: the caller should hand it to the
// store's host promptly. The kernel cycles through ephemeral ports, so two jobs started
// together get different ports. Throws zoff::Error if no socket can be bound.
int pick_free_port();

}  // namespace zoff::dist
