// Reads tensors one at a time from a .safetensors file (the format zoff export writes and
// Hugging Face's safetensors library reads), never the whole file in memory.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "zoff/unit/deferred_init.h"

namespace zoff::checkpoint {

class SafetensorsFile {
 public:
  struct Entry {
    std::string dtype;  // F32, BF16, F16, F64, I64, I32, I16, I8, U8, BOOL
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // bytes from the start of the data
  };

  // Opens `path` and checks its header: an 8-byte little-endian length, that many bytes of
  // JSON, every entry's dtype known, its byte range inside the file and as long as its
  // shape says. Anything wrong is a zoff::UsageError naming the file and the entry. The
  // `__metadata__` entry's "aliases" (a JSON object, second name -> first name, as zoff
  // export writes for tied weights) makes each second name readable too.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Tensor names, aliases included (sorted).
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  const Entry& entry(const std::string& name) const;  // UsageError when missing
  // The "__metadata__" entry's string values (zoff writes model, preset, context, step).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // One tensor as a new tensor of its stored dtype and shape.
  torch::Tensor read(const std::string& name) const;
  // One tensor into `out` (its shape): read straight into out's memory when out is
  // contiguous and of the stored dtype (no intermediate copy, no LibTorch kernel: safe on a
  // reader thread), else read and converted. Thread-safe (positioned reads).
  void read_into(const std::string& name, torch::Tensor& out) const;

  // From now on, tensors of at least kDirectMinBytes are read around the page cache
  // (O_DIRECT, in aligned chunks copied into place), where the file system allows it;
  // false when it does not (tmpfs), and reads stay buffered. For files read whole once per
  // pass and larger than the page cache can keep (streamed weights): buffered, every byte
  // is also copied into the page cache and reclaimed again on the same cores (streamed 13b
  // from disk: 0.46 GB/s against the disk's 1.13). Call it before reads start.
  bool use_direct_reads();
  bool direct_reads() const { return direct_fd_ >= 0; }
  static constexpr uint64_t kDirectMinBytes = uint64_t{1} << 20;

 private:
  // bytes at `offset` of the file into out, through this thread's aligned chunk buffer.
  void read_direct(uint64_t offset, void* out, uint64_t bytes) const;
  std::string path_;
  int fd_ = -1;
  int direct_fd_ = -1;  // the same file opened O_DIRECT, when use_direct_reads() succeeded
  uint64_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> aliases_;  // second name -> first name
  std::map<std::string, std::string> metadata_;
};

// Copies every parameter and buffer of `module` (by name; a tied tensor under either name)
// from the safetensors file at `path`, one tensor in memory at a time, converting to the
// module tensor's dtype. Every module tensor must be in the file with the same shape, and
// every file tensor in the module; otherwise a zoff::UsageError naming it, with the module
// untouched.
void load_module_from_safetensors(torch::nn::Module& module, const std::string& path);

// The same checks, then the module's buffers are copied and, instead of copying the
// parameters, returns their values as a unit::ParamInit (EngineOptions::param_init) for a
// module whose parameters are placeholders (unit::defer_parameters): each parameter is
// read from the file when the engine values its unit. The returned function keeps the
// file open. `direct_reads`: the parameters are read around the page cache where the file
// system allows it (SafetensorsFile::use_direct_reads).
unit::ParamInit safetensors_param_init(torch::nn::Module& module, const std::string& path,
                                       bool direct_reads = false);

}  // namespace zoff::checkpoint
