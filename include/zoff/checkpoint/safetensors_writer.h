// A streaming safetensors writer: declare every tensor (the header needs all offsets), then
// write their bytes one by one in that order; the file appears atomically at commit().
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "zoff/checkpoint/atomic_file.h"

namespace zoff::checkpoint {

// The safetensors format pads its JSON header with spaces so the tensor data starts at a
// multiple of this many bytes.
inline constexpr size_t kSafetensorsHeaderAlign = 8;

class SafetensorsWriter {
 public:
  // `path` is checked by the caller (check_output_path); nothing is created before the
  // first write().
  explicit SafetensorsWriter(std::string path);

  // "__metadata__" entries (strings), e.g. model, preset, context.
  void set_metadata(const std::string& key, const std::string& value);
  // The next tensor: `dtype` a LibTorch dtype (stored under its safetensors name, "BF16",
  // "F32"...). Declaring after the first write is a zoff::Error.
  void declare(const std::string& name, torch::ScalarType dtype, const std::vector<int64_t>& shape);
  // The bytes of the next declared tensor (contiguous, declared dtype and shape). The first
  // call writes the header. A tensor out of order, of another dtype or size, is a
  // zoff::Error.
  void write(const std::string& name, const torch::Tensor& values);
  // Every declared tensor written: renames the file into place; returns its bytes.
  uint64_t commit();

  size_t declared() const { return entries_.size(); }

 private:
  struct Entry {
    std::string name;
    torch::ScalarType dtype;
    std::vector<int64_t> shape;
    uint64_t bytes = 0;
  };
  void write_header();

  std::string path_;
  std::map<std::string, std::string> metadata_;
  std::vector<Entry> entries_;
  size_t next_ = 0;  // entries written
  std::unique_ptr<AtomicFileWriter> out_;
};

}  // namespace zoff::checkpoint
