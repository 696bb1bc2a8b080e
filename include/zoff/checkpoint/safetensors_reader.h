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

 private:
  std::string path_;
  int fd_ = -1;
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
// file open.
unit::ParamInit safetensors_param_init(torch::nn::Module& module, const std::string& path);

}  // namespace zoff::checkpoint
