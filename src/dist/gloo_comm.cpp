// GlooComm: TCPStore rendezvous, ProcessGroupGloo collectives, and a reduce-scatter built from
// alltoall.
#include "zoff/dist/gloo_comm.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "collective_checks.h"
#include "completed_work.h"
#include "exception_first_line.h"
#include "zoff/core/error.h"

namespace zoff::dist {
namespace {

using Clock = std::chrono::steady_clock;

// Which network interface Gloo binds: GLOO_SOCKET_IFNAME if the user named one (PyTorch's
// convention), else the address on the route to the master. createDefaultDevice alone would
// bind whatever the hostname resolves to, which on Debian is often 127.0.1.1 and unreachable
// from other nodes.
std::shared_ptr<::gloo::transport::Device> make_device(const WorldInfo& world) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname) {
    return ::c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  const std::string local = local_address_towards(world.master_addr, world.master_port);
  if (!local.empty()) return ::c10d::ProcessGroupGloo::createDeviceForHostname(local);
  return ::c10d::ProcessGroupGloo::createDefaultDevice();
}

// Gloo's transport error without its source location ("[.../pair.cc:545] ") and the advice
// it appends (" This is typically caused by ..."): what is left names the peer's address,
// e.g. "Read error [10.77.0.2]:47542: Connection reset by peer."
std::string gloo_reason(std::string reason) {
  if (!reason.empty() && reason[0] == '[') {
    const size_t close = reason.find("] ");
    if (close != std::string::npos) reason.erase(0, close + 2);
  }
  const size_t advice = reason.find(" This is typically caused");
  if (advice != std::string::npos) reason.erase(advice);
  return reason;
}

std::string endpoint(const WorldInfo& world) {
  return detail::concat(world.master_addr, ":", world.master_port);
}

c10::intrusive_ptr<::c10d::TCPStore> connect_store(const WorldInfo& world,
                                                   std::chrono::milliseconds timeout) {
  ::c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(world.master_port);
  options.isServer = world.rank == 0;
  options.waitWorkers = false;  // arrivals are counted below, so a timeout can say how many came
  options.timeout = timeout;
  try {
    return c10::make_intrusive<::c10d::TCPStore>(world.master_addr, options);
  } catch (const std::exception& e) {
    throw Error(detail::concat(
        "rendezvous at ", endpoint(world), " failed: rank ", world.rank,
        world.rank == 0 ? " could not host the store" : " could not reach the store of rank 0",
        " within ", timeout.count(), " ms (", first_line(e), ")"));
  }
}

// Every rank checks in under its own key (a second process with the same RANK is caught here)
// and then polls the arrival count until all world_size ranks are in or the deadline passes.
void wait_for_ranks(::c10d::Store& store, const WorldInfo& world, std::chrono::milliseconds timeout,
                    Clock::time_point deadline) {
  int64_t arrived = 0;
  try {
    const int64_t claims = store.add(detail::concat("zoff/rank/", world.rank), 1);
    if (claims != 1) {
      throw UsageError(detail::concat("rendezvous at ", endpoint(world), ": RANK=", world.rank,
                                      " was claimed by ", claims, " processes"));
    }
    arrived = store.add("zoff/arrived", 1);
    while (arrived < world.world_size && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      arrived = store.add("zoff/arrived", 0);
    }
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(detail::concat("rendezvous at ", endpoint(world), " failed: rank ", world.rank,
                               " lost the store (", first_line(e), ")"));
  }
  if (arrived < world.world_size) {
    throw Error(detail::concat("rendezvous at ", endpoint(world), " timed out after ",
                               timeout.count(), " ms: ", arrived, " of ", world.world_size,
                               " ranks arrived (this is rank ", world.rank, ")"));
  }
}

// Wraps a c10d Work: wait() bounds the wait by the communicator's timeout and turns every
// failure into a zoff::Error naming the collective; `finish` (the local half of a composite
// collective) runs once, after the communication succeeded.
class GlooWork final : public Work {
 public:
  GlooWork(c10::intrusive_ptr<::c10d::Work> work, std::string context,
           std::chrono::milliseconds timeout, std::function<void()> finish = {})
      : work_(std::move(work)),
        context_(std::move(context)),
        timeout_(timeout),
        finish_(std::move(finish)) {}

  void wait() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!finished_) complete();
    if (error_) std::rethrow_exception(error_);
  }

  // Non-blocking: once the communication is over, the local part (a sum over size * n
  // elements at most) runs here so that a true answer means the output is ready.
  bool done() override {
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return false;  // another thread is inside wait()
    if (finished_) return true;
    if (!work_->isCompleted()) return false;
    complete();
    return true;
  }

 private:
  void complete() {
    try {
      work_->wait(timeout_);
      if (finish_) finish_();
    } catch (const std::exception& e) {
      const std::string reason = gloo_reason(first_line(e));
      // c10d's own bounded wait says "Operation timed out!"; Gloo's transport says
      // "Timed out waiting ..." when a peer never shows up.
      if (reason.find("imed out") != std::string::npos) {
        error_ = std::make_exception_ptr(
            Error(detail::concat(context_, " timed out after ", timeout_.count(),
                                 " ms (a peer stopped or never called it): ", reason)));
      } else {
        error_ = std::make_exception_ptr(Error(
            detail::concat(context_, " failed (timeout ", timeout_.count(), " ms): ", reason)));
      }
    }
    finished_ = true;
    work_.reset();  // drops c10d's references to the tensors
  }

  std::mutex mutex_;
  c10::intrusive_ptr<::c10d::Work> work_;
  std::string context_;
  std::chrono::milliseconds timeout_;
  std::function<void()> finish_;
  bool finished_ = false;
  std::exception_ptr error_;
};

// Raw bytes of a flat tensor: Gloo moves uint8 for every dtype, bf16 and bool included.
torch::Tensor bytes_of(const torch::Tensor& flat) { return flat.view(torch::kByte); }

}  // namespace

struct GlooComm::Group {
  c10::intrusive_ptr<::c10d::TCPStore> store;
  std::shared_ptr<::gloo::transport::Device> device;  // shared with subgroups
  c10::intrusive_ptr<::c10d::ProcessGroupGloo> pg;
  std::string name = "gloo";  // in errors

  std::string context(const char* op) const {
    return detail::concat(op, " (", name, ", rank ", pg->getRank(), " of ", pg->getSize(), ")");
  }

  // The Gloo mesh of `size` ranks under the store's key prefix `prefix`.
  void connect(const std::string& prefix, int rank, int size, std::chrono::milliseconds timeout) {
    auto options = ::c10d::ProcessGroupGloo::Options::create(timeout);
    options->devices.push_back(device);
    auto prefixed = c10::make_intrusive<::c10d::PrefixStore>(prefix, store);
    pg = c10::make_intrusive<::c10d::ProcessGroupGloo>(prefixed, rank, size, std::move(options));
  }

  // Issues a collective; errors raised while issuing (argument checks inside c10d) become
  // zoff::Error too.
  WorkPtr issue(const char* op, std::chrono::milliseconds timeout,
                const std::function<c10::intrusive_ptr<::c10d::Work>()>& start,
                std::function<void()> finish = {}) {
    c10::intrusive_ptr<::c10d::Work> work;
    try {
      work = start();
    } catch (const std::exception& e) {
      throw Error(detail::concat(context(op), " could not start: ", first_line(e)));
    }
    return std::make_shared<GlooWork>(std::move(work), context(op), timeout, std::move(finish));
  }
};

GlooComm::GlooComm(const WorldInfo& world, std::chrono::milliseconds timeout)
    : group_(std::make_unique<Group>()),
      rank_(world.rank),
      size_(world.world_size),
      timeout_(timeout) {
  ZOFF_CHECK_ARG(world.world_size >= 1 && world.rank >= 0 && world.rank < world.world_size,
                 "GlooComm: rank ", world.rank, " is not in a world of ", world.world_size);
  ZOFF_CHECK_ARG(world.master_port >= 1 && world.master_port <= 65535, "GlooComm: master port ",
                 world.master_port, " is not in [1, 65535]");
  check_resolvable("MASTER_ADDR=", world.master_addr);  // fail now, not after `timeout`
  const auto deadline = Clock::now() + timeout;
  group_->store = connect_store(world, timeout);
  wait_for_ranks(*group_->store, world, timeout, deadline);
  try {
    group_->device = make_device(world);
    group_->connect("zoff/gloo", rank_, size_, timeout);
  } catch (const std::exception& e) {
    throw Error(detail::concat("rendezvous at ", endpoint(world), " failed: rank ", rank_,
                               " could not connect the Gloo mesh within ", timeout.count(), " ms (",
                               first_line(e), ")"));
  }
}

GlooComm::GlooComm(std::unique_ptr<Group> group, int rank, int size,
                   std::chrono::milliseconds timeout)
    : group_(std::move(group)), rank_(rank), size_(size), timeout_(timeout) {}

GlooComm::~GlooComm() = default;

std::shared_ptr<GlooComm> GlooComm::subgroup(const std::string& name,
                                             const std::vector<int>& members) const {
  const auto me = std::find(members.begin(), members.end(), rank_);
  ZOFF_CHECK_ARG(me != members.end(), "GlooComm::subgroup ", name, ": rank ", rank_,
                 " is not a member");
  ZOFF_CHECK_ARG(std::is_sorted(members.begin(), members.end()) &&
                     std::adjacent_find(members.begin(), members.end()) == members.end() &&
                     members.front() >= 0 && members.back() < size_,
                 "GlooComm::subgroup ", name, ": members must be distinct ascending ranks of ",
                 size_);
  auto group = std::make_unique<Group>();
  group->store = group_->store;
  group->device = group_->device;
  group->name = name;
  const int rank = static_cast<int>(me - members.begin());
  const int size = static_cast<int>(members.size());
  try {
    group->connect("zoff/gloo/" + name, rank, size, timeout_);
  } catch (const std::exception& e) {
    throw Error(detail::concat(name, ": rank ", rank_, " could not connect its group of ", size,
                               " within ", timeout_.count(), " ms (", first_line(e), ")"));
  }
  return std::shared_ptr<GlooComm>(new GlooComm(std::move(group), rank, size, timeout_));
}

WorkPtr GlooComm::all_reduce_sum(torch::Tensor tensor) {
  auto flat = flat_view(tensor, "all_reduce_sum", "tensor");
  check_reducible(flat.scalar_type(), "all_reduce_sum");
  if (flat.numel() == 0) return std::make_shared<CompletedWork>();
  return group_->issue("all_reduce_sum", timeout_, [&] {
    std::vector<at::Tensor> tensors{flat};
    return group_->pg->allreduce(tensors);
  });
}

WorkPtr GlooComm::reduce_scatter_sum(torch::Tensor input, torch::Tensor output) {
  auto in = flat_view(input, "reduce_scatter_sum", "input");
  auto out = flat_view(output, "reduce_scatter_sum", "output");
  check_reduce_scatter(in, out, size_);
  const int64_t n = out.numel();
  if (n == 0) return std::make_shared<CompletedWork>();
  // Rank r sends chunk r of its input to rank r and receives one chunk of n elements from
  // every rank, in rank order: received = [size, n] in the input's dtype. Not Gloo's own
  // reduce_scatter (PyTorch 2.x): that is an all-reduce of the whole input, twice the bytes,
  // summed in the ring's order rather than rank order, and 1.05-2.8x slower here at 4-128
  // MiB, 2 and 3 ranks (scripts/bench_gloo_reduce_scatter.py, 2026-11-27).
  auto received = torch::empty({size_ * n}, in.options());
  const int size = size_;
  return group_->issue(
      "reduce_scatter_sum", timeout_,
      [&] {
        auto send_bytes = bytes_of(in);
        auto receive_bytes = bytes_of(received);
        std::vector<int64_t> equal_split;  // empty: size equal chunks
        return group_->pg->alltoall_base(receive_bytes, send_bytes, equal_split, equal_split);
      },
      [received, out, size] { sum_in_rank_order(received, size, out); });
}

WorkPtr GlooComm::reduce_scatter_sum_v(torch::Tensor input, std::vector<int64_t> split_sizes,
                                       torch::Tensor output) {
  auto in = flat_view(input, "reduce_scatter_sum_v", "input");
  auto out = flat_view(output, "reduce_scatter_sum_v", "output");
  check_reduce_scatter_v(in, split_sizes, out, size_, rank_);
  if (std::all_of(split_sizes.begin(), split_sizes.end(),
                  [&](int64_t s) { return s == split_sizes[0]; })) {
    return reduce_scatter_sum(in, out);
  }
  const int64_t mine = out.numel();
  const int64_t element_bytes = static_cast<int64_t>(in.element_size());
  // Counts are in bytes, the unit of the uint8 views Gloo moves. Rank r sends piece j to rank
  // j and receives piece r (mine elements) from every rank: received = [size, mine].
  std::vector<int64_t> send_counts,
      receive_counts(static_cast<size_t>(size_), mine * element_bytes);
  for (int64_t s : split_sizes) send_counts.push_back(s * element_bytes);
  // At least one element so that even an empty piece has a valid data pointer.
  auto storage = torch::empty({std::max<int64_t>(1, size_ * mine)}, in.options());
  auto received = storage.narrow(0, 0, size_ * mine);
  const int size = size_;
  return group_->issue(
      "reduce_scatter_sum_v", timeout_,
      [&] {
        auto send_bytes = bytes_of(in);
        auto receive_bytes = bytes_of(received);
        return group_->pg->alltoall_base(receive_bytes, send_bytes, receive_counts, send_counts);
      },
      [storage, received, out, size, mine] {
        if (mine > 0) sum_in_rank_order(received, size, out);
      });
}

WorkPtr GlooComm::all_gather(torch::Tensor input, torch::Tensor output) {
  auto in = flat_view(input, "all_gather", "input");
  auto out = flat_view(output, "all_gather", "output");
  check_all_gather(in, out, size_);
  if (in.numel() == 0) return std::make_shared<CompletedWork>();
  return group_->issue("all_gather", timeout_, [&] {
    // Gloo writes each rank's bytes straight into its slot of `output` (views, no gather
    // buffer of ours); it copies the input first, so the input may be this rank's own slot.
    auto slots = bytes_of(out).view({size_, -1});
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < size_; ++r) outputs[0].push_back(slots[r]);
    std::vector<at::Tensor> inputs{bytes_of(in)};
    return group_->pg->allgather(outputs, inputs);
  });
}

WorkPtr GlooComm::broadcast(torch::Tensor tensor, int root) {
  auto flat = flat_view(tensor, "broadcast", "tensor");
  check_root(root, size_, "broadcast");
  if (flat.numel() == 0) return std::make_shared<CompletedWork>();
  return group_->issue("broadcast", timeout_, [&] {
    std::vector<at::Tensor> tensors{bytes_of(flat)};
    ::c10d::BroadcastOptions options;
    options.rootRank = root;
    return group_->pg->broadcast(tensors, options);
  });
}

void GlooComm::barrier() {
  group_->issue("barrier", timeout_, [&] { return group_->pg->barrier(); })->wait();
}

}  // namespace zoff::dist
