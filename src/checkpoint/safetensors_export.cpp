// export_safetensors: our own small safetensors writer fed by CheckpointReader.
#include "zoff/checkpoint/safetensors_export.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "zoff/checkpoint/atomic_file.h"
#include "zoff/checkpoint/checkpoint_reader.h"
#include "zoff/checkpoint/safetensors_writer.h"
#include "zoff/core/error.h"
#include "zoff/core/output_path.h"

namespace zoff::checkpoint {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian and written from memory as is");

// The spec pads the JSON header with spaces so the data starts 8-byte aligned.

// The trainable parameters in module registration order.
std::vector<partition::ParamSlot> export_order(const CheckpointInfo& info) {
  std::vector<partition::ParamSlot> slots = info.slots;
  std::sort(slots.begin(), slots.end(),
            [](const auto& a, const auto& b) { return a.module_index < b.module_index; });
  return slots;
}

// The JSON header: parameters (fp32) back to back, then the frozen parameters and buffers
// in their stored dtype. A tied tensor is written once, under its first name; its other
// names are listed in the metadata.
nlohmann::ordered_json safetensors_header(const CheckpointInfo& info,
                                          const std::vector<partition::ParamSlot>& slots,
                                          ExportSummary* summary) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"},
                            {"producer", "zoff"},
                            {"model", info.model},
                            {"preset", info.preset},
                            {"context", std::to_string(info.context)},
                            {"step", std::to_string(info.step)},
                            {"checkpoint", info.dir}};
  uint64_t offset = 0;
  for (const auto& s : slots) {
    const uint64_t bytes = static_cast<uint64_t>(s.numel) * sizeof(float);
    header[s.name] = {
        {"dtype", "F32"}, {"shape", s.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    summary->elements += s.numel;
  }
  for (const auto& e : info.replicated) {
    header[e.name] = {
        {"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes}}};
    offset += e.bytes;
  }
  if (!info.aliases.empty()) {
    nlohmann::ordered_json aliases = nlohmann::ordered_json::object();
    for (const auto& [name, first] : info.aliases) aliases[name] = first;
    header["__metadata__"]["aliases"] = aliases.dump();
  }
  return header;
}

}  // namespace

ExportSummary export_safetensors(const std::string& dir_or_root, const std::string& out_path) {
  check_output_path("--out", out_path);  // before any work: never replace what is not ours
  CheckpointReader reader(dir_or_root);
  const auto& info = reader.info();

  ExportSummary summary;
  const std::vector<partition::ParamSlot> slots = export_order(info);
  const auto header = safetensors_header(info, slots, &summary);
  std::string text = header.dump();
  text.append(
      (kSafetensorsHeaderAlign - text.size() % kSafetensorsHeaderAlign) % kSafetensorsHeaderAlign,
      ' ');
  const uint64_t n = text.size();

  AtomicFileWriter out = [&]() -> AtomicFileWriter {
    try {
      return AtomicFileWriter(out_path);
    } catch (const Error& e) {
      throw UsageError(detail::concat("--out ", out_path, ": ", e.what()));
    }
  }();
  out.write(&n, sizeof n);  // uint64 little-endian
  out.write(text.data(), text.size());
  for (const auto& s : slots) {
    const auto t = reader.read_param(s);
    out.write(t.data_ptr<float>(), static_cast<size_t>(s.numel) * sizeof(float));
  }
  for (const auto& e : info.replicated) {
    const auto t = reader.read_replicated(e);
    out.write(t.data_ptr(), static_cast<size_t>(e.bytes));
  }
  summary.checkpoint_dir = info.dir;
  summary.tensors = static_cast<int64_t>(slots.size() + info.replicated.size());
  summary.file_bytes = out.bytes();
  out.commit();
  return summary;
}

}  // namespace zoff::checkpoint
