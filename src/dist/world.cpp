// WorldInfo::from_env: reads and validates the torchrun-style environment of one rank.
#include "zoff/dist/world.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>
#include <string>

#include "zoff/core/error.h"

namespace zoff::dist {
namespace {

std::optional<std::string> env_value(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// Parses a whole decimal integer; "12abc", "", " 3" and out-of-range values are rejected
// with the variable's name and value in the message.
int parse_int(const char* name, const std::string& text) {
  ZOFF_CHECK_ARG(!text.empty(), name, " is set but empty; expected an integer");
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  ZOFF_CHECK_ARG(
      end != nullptr && *end == '\0' && !std::isspace(static_cast<unsigned char>(text[0])), name,
      "='", text, "' is not an integer");
  ZOFF_CHECK_ARG(errno != ERANGE && value >= INT_MIN && value <= INT_MAX, name, "='", text,
                 "' is out of range");
  return static_cast<int>(value);
}

std::optional<int> env_int(const char* name) {
  auto text = env_value(name);
  if (!text) return std::nullopt;
  return parse_int(name, *text);
}

}  // namespace

WorldInfo WorldInfo::from_env() {
  WorldInfo world;
  const auto rank = env_int("RANK");
  const auto world_size = env_int("WORLD_SIZE");
  const auto local_rank = env_int("LOCAL_RANK");
  const auto local_world_size = env_int("LOCAL_WORLD_SIZE");
  const auto master_addr = env_value("MASTER_ADDR");
  const auto master_port = env_int("MASTER_PORT");

  // RANK without WORLD_SIZE (or the reverse) is a half-configured launch, not a single process.
  ZOFF_CHECK_ARG(rank.has_value() == world_size.has_value(),
                 rank ? "RANK is set but WORLD_SIZE is not" : "WORLD_SIZE is set but RANK is not",
                 "; set both (zoff launch does) or neither");
  if (world_size) {
    ZOFF_CHECK_ARG(*world_size >= 1, "WORLD_SIZE=", *world_size, " must be at least 1");
    ZOFF_CHECK_ARG(*rank >= 0 && *rank < *world_size, "RANK=", *rank,
                   " must be in [0, WORLD_SIZE) with WORLD_SIZE=", *world_size);
    world.rank = *rank;
    world.world_size = *world_size;
  }
  world.local_world_size = local_world_size.value_or(world.world_size);
  world.local_rank = local_rank.value_or(world.rank % world.local_world_size);
  ZOFF_CHECK_ARG(world.local_world_size >= 1 && world.local_world_size <= world.world_size,
                 "LOCAL_WORLD_SIZE=", world.local_world_size,
                 " must be in [1, WORLD_SIZE=", world.world_size, "]");
  ZOFF_CHECK_ARG(world.local_rank >= 0 && world.local_rank < world.local_world_size,
                 "LOCAL_RANK=", world.local_rank,
                 " must be in [0, LOCAL_WORLD_SIZE=", world.local_world_size, ")");
  ZOFF_CHECK_ARG(world.local_rank <= world.rank, "LOCAL_RANK=", world.local_rank,
                 " cannot exceed RANK=", world.rank);
  if (master_addr) {
    ZOFF_CHECK_ARG(!master_addr->empty(), "MASTER_ADDR is set but empty");
    world.master_addr = *master_addr;
  }
  if (master_port) {
    ZOFF_CHECK_ARG(*master_port >= 1 && *master_port <= 65535, "MASTER_PORT=", *master_port,
                   " must be in [1, 65535]");
    world.master_port = *master_port;
  }
  return world;
}

void check_resolvable(const std::string& label, const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int status = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) freeaddrinfo(found);
  ZOFF_CHECK_ARG(status == 0, label, host, ": cannot be resolved (", gai_strerror(status), ")");
}

std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return "";
  std::string local;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in self{};
    socklen_t len = sizeof(self);
    char text[INET_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) == 0 &&
        inet_ntop(AF_INET, &self.sin_addr, text, sizeof(text)) != nullptr) {
      local = text;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  return local;
}

}  // namespace zoff::dist
