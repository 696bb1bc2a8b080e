// pick_free_port: bind port 0, read the kernel's choice, close.
#include "zoff/dist/free_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "zoff/core/error.h"

namespace zoff::dist {

int pick_free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ZOFF_CHECK(fd >= 0, "pick_free_port: socket() failed: ", std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const int saved_errno = errno;
  close(fd);
  ZOFF_CHECK(ok, "pick_free_port: could not bind a port: ", std::strerror(saved_errno));
  return ntohs(address.sin_port);
}

}  // namespace zoff::dist
