// ShmChannel: a shared-memory segment that every rank on one host maps, and the round protocol
// through which the ranks swap data in it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shared_segment.h"

namespace zoff::dist {

// The segment: a header, one line of counters per rank, then two banks of `size` slots of
// slot_bytes each. A collective runs as rounds; round s uses bank s % 2:
//   1. wait until every rank has finished reading round s - 2 (the bank's previous use);
//   2. fill my slot, then publish ready[me] = s;
//   3. wait until every rank has published s; read any slots; publish done[me] = s.
// Two banks let a fast rank fill round s + 1 while a slow one still reads round s. The waits
// sleep on futexes (no spinning core), give up after the timeout, and notice a peer process
// that has exited.
class ShmChannel {
 public:
  // Rank 0 creates the segment under a fresh name (its pid and a random nonce); the others
  // open it by that name. The creator writes the nonce into the segment and the others check
  // it against nonce() as rank 0 sent it, so a namesake segment is refused.
  static ShmChannel create(int size, int64_t slot_bytes);
  static ShmChannel open(const std::string& name, int rank, int size, int64_t slot_bytes,
                         uint64_t nonce);
  ShmChannel(ShmChannel&& other) noexcept;
  uint64_t nonce() const { return segment_.nonce(); }
  ShmChannel& operator=(ShmChannel&&) = delete;
  ShmChannel(const ShmChannel&) = delete;
  ~ShmChannel();

  const std::string& name() const { return segment_.name(); }
  int64_t slot_bytes() const { return slot_bytes_; }

  // Records this process's id for the peers' liveness checks; then, once every rank has
  // called it (the caller synchronizes), check_peers() decides whether ids can be trusted
  // (they cannot across pid namespaces).
  void announce(int rank);
  void check_peers();
  // Removes the name; the mapping stays valid. Called once every rank has mapped it.
  void unlink() { segment_.unlink(); }

  using Fill = std::function<void(std::byte* mine)>;
  using Read = std::function<void(const std::vector<const std::byte*>& slots)>;
  // One round. `op` names the collective in errors; `should_stop` is polled while waiting.
  void round(const char* op, const Fill& fill, const Read& read, std::chrono::milliseconds timeout,
             const std::function<bool()>& should_stop);

 private:
  ShmChannel(SharedSegment segment, int rank, int size, int64_t slot_bytes);
  struct Header;
  struct PeerLine;
  Header& header() const;
  PeerLine& peer(int r) const;
  std::byte* slot(uint32_t bank, int r) const;
  void wait_for(std::atomic<uint32_t>& counter, uint32_t target, int peer_rank, const char* op,
                const char* what, std::chrono::milliseconds timeout,
                const std::function<bool()>& should_stop) const;

  SharedSegment segment_;
  int rank_ = 0;
  int size_ = 1;
  int64_t slot_bytes_ = 0;
  uint64_t round_ = 0;  // rounds completed so far; the same on every rank
  // The slots a round's reader sees (size_ of them), kept: a round runs every 2 MiB.
  std::vector<const std::byte*> read_slots_;
  bool trust_pids_ = false;
};

}  // namespace zoff::dist
