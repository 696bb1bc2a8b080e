// Asking the kernel for TCP ports nobody is using, for a rendezvous on one node.
#pragma once

namespace zoff::dist {

// Returns the first of `count` consecutive TCP ports (count >= 1) that could all be bound on
// every IPv4 interface just now. The ports are free now, not reserved: the caller should hand
// them to the store's host promptly. They are drawn at random from below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range), where the kernel never puts the sockets of
// outgoing connections or of bind(port 0): Gloo opens many of those, and a port picked inside
// that range could be taken by another job's connection before the store binds it. When the
// range leaves too little room below it, the kernel's own choice of one free port (count 1
// only). Throws zoff::Error if no such ports are found.
int pick_free_port(int count = 1);

}  // namespace zoff::dist
