// The host MasterStore: the master (fp32, or split: optim/split_master.h) and the states as
// regions of a host tier, stepped in place.
#include <cstring>

#include "host_split_master.h"
#include "zoff/core/error.h"
#include "zoff/engine/master_store.h"
#include "zoff/optim/state_dtype.h"

namespace zoff::engine {
namespace {

// A section over `numel` elements of `dtype` in host memory at `data`.
StateSection memory_section(std::string name, std::string dtype, int64_t numel, void* data) {
  StateSection s;
  s.name = std::move(name);
  s.dtype = std::move(dtype);
  s.numel = numel;
  const size_t bytes = section_element_bytes(s.dtype);
  auto* base = static_cast<char*>(data);
  s.read = [base, bytes](int64_t offset, int64_t n, void* dst) {
    std::memcpy(dst, base + static_cast<size_t>(offset) * bytes, static_cast<size_t>(n) * bytes);
  };
  s.write = [base, bytes](int64_t offset, int64_t n, const void* src) {
    std::memcpy(base + static_cast<size_t>(offset) * bytes, src, static_cast<size_t>(n) * bytes);
  };
  return s;
}

// The sections of one stored optimizer state over `numel` elements from element `offset`
// (stage 0 narrows the whole-buffer state to this rank's shard): fp32 floats, bf16 bits,
// or int8 codes (signed for exp_avg, unsigned for exp_avg_sq) followed by their scales. An
// int8 section must be one whole segment of the state's block grid (stage 0's optimizer
// restarts it at every rank's shard), so its codes and scales stand alone.
void add_stored_sections(const std::string& name, const optim::StoredState& st, int64_t offset,
                         int64_t numel, std::vector<StateSection>* out) {
  const std::string dtype = section_dtype(st.dtype, name);
  const size_t elem = section_element_bytes(dtype);
  out->push_back(memory_section(name, dtype, numel, static_cast<char*>(st.data) + offset * elem));
  if (st.dtype != optim::StateDtype::kInt8) return;
  const auto segment = static_cast<int64_t>(st.segment_numel);
  ZOFF_CHECK(segment > 0 && offset % segment == 0 && numel <= segment, "int8 state ", name,
             ": elements [", offset, ", ", offset + numel, ") are not one segment of ", segment);
  const size_t first = static_cast<size_t>(offset / segment) * optim::state_blocks(segment);
  const size_t blocks = optim::state_blocks(static_cast<size_t>(numel));
  ZOFF_CHECK(first + blocks <= st.num_scales, "int8 state ", name, ": scales ", first, " + ",
             blocks, " past its ", st.num_scales);
  out->push_back(
      memory_section(name + ".scales", "F32", static_cast<int64_t>(blocks), st.scales + first));
}

// Every rank's piece ([rank * n, + n) of n = size() equal pieces) to every rank, after each
// loaded its own. Any dtype: the bytes move as they are.
void gather_pieces(dist::Comm& comm, void* data, int64_t piece_numel, torch::ScalarType dtype) {
  const int64_t world = comm.size();
  auto whole = torch::from_blob(data, {world * piece_numel}, dtype);
  auto mine = whole.narrow(0, comm.rank() * piece_numel, piece_numel).clone();
  comm.all_gather(mine, whole)->wait();
}

// The same for one stored optimizer state, whose segments are the ranks' slices.
void gather_stored(dist::Comm& comm, const optim::StoredState& st, int64_t slice_numel) {
  switch (st.dtype) {
    case optim::StateDtype::kFp32:
      gather_pieces(comm, st.data, slice_numel, torch::kFloat32);
      return;
    case optim::StateDtype::kBf16:
      gather_pieces(comm, st.data, slice_numel, torch::kInt16);
      return;
    case optim::StateDtype::kInt8:
      ZOFF_CHECK(st.segment_numel == static_cast<size_t>(slice_numel),
                 "int8 state: block segments of ", st.segment_numel, " elements, not the slice's ",
                 slice_numel);
      gather_pieces(comm, st.data, slice_numel, torch::kUInt8);
      gather_pieces(comm, st.scales,
                    static_cast<int64_t>(optim::state_blocks(static_cast<size_t>(slice_numel))),
                    torch::kFloat32);
      return;
  }
}

// What keeps the master's region alive: the master tensor owns it (its deleter), so a view
// of the master a caller keeps stays valid after the store is gone.
struct RegionOwner {
  std::shared_ptr<offload::Tier> tier;
  std::unique_ptr<offload::TierRegion> region;
  ~RegionOwner() { region.reset(); }  // a region goes before its tier
};

// `numel` fp32 elements in a region of `tier` named `name`, as a tensor that owns it.
torch::Tensor region_tensor(const std::shared_ptr<offload::Tier>& tier, const std::string& name,
                            size_t numel) {
  auto owner = std::make_shared<RegionOwner>();
  owner->tier = tier;
  owner->region = tier->allocate(name, numel * sizeof(float));
  if (numel == 0) return torch::zeros({0}, torch::kFloat32);
  return torch::from_blob(
      owner->region->host_data(), {static_cast<int64_t>(numel)}, [owner](void*) mutable {},
      torch::TensorOptions().dtype(torch::kFloat32));
}

class HostMasterStore : public MasterStore {
 public:
  HostMasterStore(std::unique_ptr<offload::Tier> tier, const MasterStoreOptions& o,
                  const optim::OptimizerOptions& options)
      : tier_(std::move(tier)), numel_(o.numel) {
    ZOFF_CHECK(tier_->is_host(), "host master store: tier ", tier_->name(), " is not host memory");
    if (o.split_master) {
      ZOFF_CHECK(!o.params_master.defined() && o.backend == optim::OptimizerBackend::kFused,
                 "host master store: the split master needs the fused optimizer and a master "
                 "apart from the compute parameters");
      split_ = std::make_unique<HostSplitMaster>(*tier_, o.numel);
    } else {
      master_ = o.params_master.defined()
                    ? o.params_master  // the fp32 compute parameters are the master
                    : region_tensor(tier_, "master", o.numel);
      ZOFF_CHECK(master_.scalar_type() == torch::kFloat32 && master_.is_contiguous() &&
                     master_.is_cpu() && static_cast<size_t>(master_.numel()) == o.numel,
                 "host master store: the master must be ", o.numel,
                 " contiguous fp32 elements in host memory");
    }
    const optim::StateMemory memory = [this](const std::string& name, size_t bytes) {
      states_.push_back(tier_->allocate(name, bytes));
      return states_.back()->host_data();
    };
    optimizer_ = optim::make_shard_optimizer(options, o.numel, o.backend, o.threads,
                                             o.segment_numel, memory);
  }

  size_t numel() const override { return numel_; }
  void fill(size_t offset, const float* values, size_t n) override {
    if (split_) return split_->fill(offset, values, n);
    std::memcpy(master_.data_ptr<float>() + offset, values, n * sizeof(float));
  }
  void finish_fill() override {}

  // The split master steps the copy it was bound to: out.out16 (or the pieces) are that copy.
  void step(const float* grads, double lr, const StepOutput& out) override {
    if (split_) {
      settled_ += split_->step(*optimizer_, grads, lr, out.out16);
      return;
    }
    optimizer_->step(master_.data_ptr<float>(), grads, lr, out.copy_out, out.out16);
  }
  void step_scattered(const float* grads, double lr, optim::CopyOut copy_out,
                      const optim::CopyOutPieces& pieces) override {
    if (split_) {
      settled_ += split_->step(*optimizer_, grads, lr);
      return;
    }
    optimizer_->step_scattered(master_.data_ptr<float>(), grads, lr, copy_out, pieces);
  }
  void bind_compute_copy(const torch::Tensor& copy) override { split().bind(copy); }
  void bind_compute_pieces(const optim::CopyOutPieces& pieces) override { split().bind(pieces); }
  bool split_master() const override { return split_ != nullptr; }
  uint64_t settled_count() const override { return settled_; }

  std::vector<StateSection> sections(int64_t offset, int64_t numel) override {
    std::vector<StateSection> out;
    out.push_back(split_
                      ? split_section(offset, numel)
                      : memory_section("master", "F32", numel, master_.data_ptr<float>() + offset));
    for (auto& [name, st] : optimizer_->stored_state_buffers()) {
      add_stored_sections(name, st, offset, numel, &out);
    }
    return out;
  }
  void share_slices(dist::Comm& comm, int64_t slice_numel) override {
    ZOFF_CHECK(!split_, "host master store: stage 0 keeps an fp32 master, not a split one");
    for (auto& [name, st] : optimizer_->stored_state_buffers()) {
      gather_stored(comm, st, slice_numel);
    }
    gather_pieces(comm, master_.data_ptr<float>(), slice_numel, torch::kFloat32);
  }
  void read_master(size_t offset, size_t n, float* dst) override {
    if (split_) return split_->read(offset, n, dst);
    std::memcpy(dst, master_.data_ptr<float>() + offset, n * sizeof(float));
  }
  void set_step_count(int64_t applied_steps) override { optimizer_->set_step_count(applied_steps); }
  StoreBytes bytes() const override {
    StoreBytes b;
    b.memory_master = numel() * (split_ ? sizeof(uint16_t) : sizeof(float));
    b.memory_states = optimizer_->state_bytes();
    return b;
  }
  torch::Tensor master() const override { return master_; }
  optim::ShardOptimizer* memory_optimizer() override { return optimizer_.get(); }

 private:
  HostSplitMaster& split() {
    ZOFF_CHECK(split_ != nullptr, "host master store: it keeps an fp32 master, not a split one");
    return *split_;
  }
  // The master's section of a split master: fp32 values, joined as read and split as
  // written (elements [offset, offset + numel) of the store).
  StateSection split_section(int64_t offset, int64_t numel) {
    StateSection s;
    s.name = "master";
    s.numel = numel;
    HostSplitMaster* m = split_.get();
    s.read = [m, offset](int64_t at, int64_t n, void* dst) {
      m->read(static_cast<size_t>(offset + at), static_cast<size_t>(n), static_cast<float*>(dst));
    };
    s.write = [m, offset](int64_t at, int64_t n, const void* src) {
      m->write(static_cast<size_t>(offset + at), static_cast<size_t>(n),
               static_cast<const float*>(src));
    };
    return s;
  }

  // Destroyed in reverse: the optimizer, then the split master's and the states' regions,
  // then the tier (the master's region goes with the last tensor that views it).
  std::shared_ptr<offload::Tier> tier_;
  size_t numel_;
  std::vector<std::unique_ptr<offload::TierRegion>> states_;
  std::unique_ptr<HostSplitMaster> split_;  // the split master, else master_
  torch::Tensor master_;
  std::unique_ptr<optim::ShardOptimizer> optimizer_;
  uint64_t settled_ = 0;
};

}  // namespace

std::unique_ptr<MasterStore> make_host_master_store(std::unique_ptr<offload::Tier> tier,
                                                    const MasterStoreOptions& options,
                                                    const optim::OptimizerOptions& optimizer) {
  return std::make_unique<HostMasterStore>(std::move(tier), options, optimizer);
}

}  // namespace zoff::engine
