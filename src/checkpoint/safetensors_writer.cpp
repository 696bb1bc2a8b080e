// SafetensorsWriter: header from the declared tensors, then their bytes in order.
#include "zoff/checkpoint/safetensors_writer.h"

#include <nlohmann/json.hpp>

#include "zoff/checkpoint/replicated_sections.h"
#include "zoff/core/error.h"

namespace zoff::checkpoint {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian and written from memory as is");

}  // namespace

SafetensorsWriter::SafetensorsWriter(std::string path) : path_(std::move(path)) {}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  ZOFF_CHECK(!out_, "safetensors ", path_, ": metadata set after the first tensor");
  metadata_[key] = value;
}

void SafetensorsWriter::declare(const std::string& name, torch::ScalarType dtype,
                                const std::vector<int64_t>& shape) {
  ZOFF_CHECK(!out_, "safetensors ", path_, ": tensor ", name, " declared after the first write");
  uint64_t numel = 1;
  for (int64_t d : shape) numel *= static_cast<uint64_t>(d);
  entries_.push_back({name, dtype, shape, numel * c10::elementSize(dtype)});
}

void SafetensorsWriter::write_header() {
  nlohmann::ordered_json header;
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata_) meta[k] = v;
  header["__metadata__"] = meta;
  uint64_t offset = 0;
  for (const auto& e : entries_) {
    header[e.name] = {{"dtype", dtype_name(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + e.bytes}}};
    offset += e.bytes;
  }
  std::string text = header.dump();
  text.append(
      (kSafetensorsHeaderAlign - text.size() % kSafetensorsHeaderAlign) % kSafetensorsHeaderAlign,
      ' ');
  const uint64_t n = text.size();
  out_ = std::make_unique<AtomicFileWriter>(path_);
  out_->write(&n, sizeof n);  // uint64 little-endian
  out_->write(text.data(), text.size());
}

void SafetensorsWriter::write(const std::string& name, const torch::Tensor& values) {
  ZOFF_CHECK(next_ < entries_.size(), "safetensors ", path_, ": tensor ", name,
             " was not declared (", entries_.size(), " declared, all written)");
  const Entry& e = entries_[next_];
  ZOFF_CHECK(name == e.name, "safetensors ", path_, ": tensor ", name, " written where ", e.name,
             " was declared");
  ZOFF_CHECK(
      values.scalar_type() == e.dtype && values.nbytes() == e.bytes && values.is_contiguous(),
      "safetensors ", path_, ": tensor ", name, " is ", values.scalar_type(), " ", values.sizes(),
      ", declared ", dtype_name(e.dtype), " of ", e.bytes, " bytes");
  if (!out_) write_header();
  out_->write(values.data_ptr(), e.bytes);
  ++next_;
}

uint64_t SafetensorsWriter::commit() {
  ZOFF_CHECK(next_ == entries_.size(), "safetensors ", path_, ": ", next_, " of ", entries_.size(),
             " declared tensors written");
  if (!out_) write_header();  // a model without tensors still gets a valid file
  const uint64_t bytes = out_->bytes();
  out_->commit();
  return bytes;
}

}  // namespace zoff::checkpoint
