// The communicator for ranks that share a host: collectives through shared memory, not TCP.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "zoff/dist/comm.h"

namespace zoff::dist {

// On one host, Gloo's TCP loopback moves ~1.15 GB/s on this machine and spends a core's time
// in the kernel doing it; here every rank copies its part into a segment all ranks map and
// reads the others' parts out, at memcpy speed. The results are those of GlooComm bit for bit
// where GlooComm fixes the order: the reduce-scatters are the same left-to-right sums in the
// accumulate dtype, and all_reduce_sum is that sum too (identical on every rank).
//
// Collectives run in issue order on one thread of the communicator, so they overlap the
// caller's compute like Gloo's do; large tensors pass through the segment in rounds of
// slot_bytes per rank. Every wait gives up after the timeout with zoff::Error naming the
// collective and the rank waited for, and a peer process that exits is noticed within 50 ms.
class ShmComm final : public Comm {
 public:
  // Bytes each rank may put in the segment per round; the segment holds 2 * size of them
  // (8 MiB for 2 ranks), well inside the 64 MB /dev/shm of a default container.
  static constexpr int64_t kDefaultSlotBytes = int64_t{2} << 20;

  // Collective over `bootstrap` (every rank of it calls this): rank 0 creates the segment,
  // the others map it. Returns nullptr, with the reason in *why_not, when any rank could not
  // (ranks on different hosts, no /dev/shm, no room in it); the caller then keeps bootstrap.
  // slot_bytes must be a positive multiple of 64 (UsageError otherwise). bootstrap stays
  // owned: it holds the job's store.
  static std::shared_ptr<ShmComm> connect(CommPtr bootstrap, std::chrono::milliseconds timeout,
                                          int64_t slot_bytes, std::string* why_not);
  ~ShmComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  WorkPtr all_reduce_sum(torch::Tensor tensor) override;
  WorkPtr reduce_scatter_sum(torch::Tensor input, torch::Tensor output) override;
  WorkPtr reduce_scatter_sum_v(torch::Tensor input, std::vector<int64_t> split_sizes,
                               torch::Tensor output) override;
  WorkPtr all_gather(torch::Tensor input, torch::Tensor output) override;
  WorkPtr broadcast(torch::Tensor tensor, int root) override;
  void barrier() override;
  // A segment of its own per call, created by rank 0 and mapped by every rank; unmapped
  // when the last tensor viewing it (on each rank) is gone.
  torch::Tensor shared_tensor(int64_t numel, torch::ScalarType dtype,
                              std::string* why_not) override;
  std::string backend() const override { return "shm"; }

 private:
  struct State;
  explicit ShmComm(std::unique_ptr<State> state);
  WorkPtr submit(const char* op, std::function<void(const char*)> job);

  std::unique_ptr<State> state_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace zoff::dist
