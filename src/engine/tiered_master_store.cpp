// The disk MasterStore: the master and states as regions of a disk tier, stepped in sub-groups.
#include <cstring>

#include "zoff/core/error.h"
#include "zoff/engine/master_store.h"

namespace zoff::engine {
namespace {

// A section over `numel` fp32 floats in host memory (the int8 scales, which stay in RAM).
StateSection scale_section(std::string name, int64_t numel, float* data) {
  StateSection s;
  s.name = std::move(name);
  s.numel = numel;
  s.read = [data](int64_t offset, int64_t n, void* dst) {
    std::memcpy(dst, data + offset, static_cast<size_t>(n) * sizeof(float));
  };
  s.write = [data](int64_t offset, int64_t n, const void* src) {
    std::memcpy(data + offset, src, static_cast<size_t>(n) * sizeof(float));
  };
  return s;
}

class TieredMasterStore : public MasterStore {
 public:
  TieredMasterStore(std::unique_ptr<offload::Tier> tier, const optim::OptimizerOptions& options,
                    int threads, size_t numel, const SubGroupOptions& sub_groups)
      : tier_(std::move(tier)),
        tiered_(std::make_unique<TieredOptimizer>(*tier_, options, threads, numel, sub_groups)) {}
  ~TieredMasterStore() override { tiered_.reset(); }  // its regions go before the tier

  size_t numel() const override { return tiered_->numel(); }
  void fill(size_t offset, const float* values, size_t n) override {
    tiered_->append_master(offset, values, n);
  }
  void finish_fill() override { tiered_->finish_master(); }

  void step(const float* grads, double lr, const StepOutput& out) override {
    tiered_->step(grads, lr, out.copy_out, out.out16, out.out32);
  }
  void begin_step(const float* grads, double lr, const StepOutput& out) override {
    tiered_->begin_step(grads, lr, out.copy_out, out.out16, out.out32);
  }
  void grads_final(size_t offset, size_t n) override { tiered_->grads_final(offset, n); }
  void finish_step() override { tiered_->finish_step(); }
  void abandon_step() override { tiered_->abandon_step(); }
  void prefetch_step() override { tiered_->prefetch(); }
  double take_grads(size_t offset, const float* piece, size_t n, bool first,
                    int divide_by) override {
    return tiered_->accumulate_grads(offset, piece, n, first, divide_by);
  }
  void set_grad_scale(double coef) override { tiered_->set_grad_scale(coef); }
  void bind_compute_copy(const torch::Tensor& copy) override {
    ZOFF_CHECK(copy.defined() && copy.scalar_type() == torch::kBFloat16 && copy.is_cpu() &&
                   copy.is_contiguous() && static_cast<size_t>(copy.numel()) == numel(),
               "disk master store: the split master's copy must be ", numel(),
               " contiguous bf16 elements in host memory");
    tiered_->set_split_copy(reinterpret_cast<uint16_t*>(copy.data_ptr()));
  }

  // Every region as it is stored, streamed range by range; int8 scales from host memory.
  std::vector<StateSection> sections(int64_t offset, int64_t numel) override {
    ZOFF_CHECK(offset == 0 && static_cast<size_t>(numel) == tiered_->numel(),
               "disk master store: sections cover the whole store");
    std::vector<StateSection> out;
    const auto names = tiered_->region_names();
    TieredOptimizer* t = tiered_.get();
    for (size_t r = 0; r < names.size(); ++r) {
      StateSection s;
      s.name = names[r];
      s.dtype = r == 0 ? "F32" : section_dtype(t->optimizer().state_dtype(), s.name);
      s.numel = numel;
      s.read = [t, r](int64_t at, int64_t n, void* dst) {
        t->read(r, static_cast<size_t>(at), static_cast<size_t>(n), dst);
      };
      s.write = [t, r](int64_t at, int64_t n, const void* src) {
        t->write(r, static_cast<size_t>(at), static_cast<size_t>(n), src);
      };
      out.push_back(std::move(s));
      if (r > 0 && t->has_scales()) {
        out.push_back(scale_section(names[r] + ".scales", static_cast<int64_t>(t->num_scales()),
                                    t->scales(r - 1)));
      }
    }
    return out;
  }
  void read_master(size_t offset, size_t n, float* dst) override {
    tiered_->read(0, offset, n, dst);
  }
  void set_step_count(int64_t applied_steps) override {
    tiered_->optimizer().set_step_count(applied_steps);
  }
  StoreBytes bytes() const override {
    StoreBytes b;
    b.disk_states = tiered_->state_disk_bytes();
    b.disk_master = tiered_->disk_bytes() - b.disk_states;
    b.disk_grads = tiered_->grad_disk_bytes();
    b.memory_states = tiered_->scale_bytes();
    b.host_buffers = tiered_->host_bytes() - tiered_->scale_bytes();
    return b;
  }
  bool split_master() const override { return tiered_->split_master(); }
  uint64_t settled_count() const override { return tiered_->settled_count(); }
  TieredOptimizer* tiered() override { return tiered_.get(); }
  const TieredOptimizer* tiered() const override { return tiered_.get(); }
  std::string io_description() const override { return tier_->io_description(); }

 private:
  std::unique_ptr<offload::Tier> tier_;
  std::unique_ptr<TieredOptimizer> tiered_;
};

}  // namespace

std::unique_ptr<MasterStore> make_disk_master_store(std::unique_ptr<offload::Tier> tier,
                                                    const MasterStoreOptions& options,
                                                    const optim::OptimizerOptions& optimizer) {
  return std::make_unique<TieredMasterStore>(std::move(tier), optimizer, options.threads,
                                             options.numel, options.sub_groups);
}

}  // namespace zoff::engine
