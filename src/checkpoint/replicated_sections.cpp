// Replicated tensors in a checkpoint: dtype names, meta.json entries, rank-file sections.
#include "zoff/checkpoint/replicated_sections.h"

#include <array>

#include "zoff/core/error.h"

namespace zoff::checkpoint {
namespace {

constexpr std::array<std::pair<torch::ScalarType, const char*>, 10> kDtypes{{
    {torch::kFloat32, "F32"},
    {torch::kBFloat16, "BF16"},
    {torch::kFloat16, "F16"},
    {torch::kFloat64, "F64"},
    {torch::kInt64, "I64"},
    {torch::kInt32, "I32"},
    {torch::kInt16, "I16"},
    {torch::kInt8, "I8"},
    {torch::kUInt8, "U8"},
    {torch::kBool, "BOOL"},
}};

std::string section_name(const std::string& name) { return "replicated." + name; }

}  // namespace

std::string dtype_name(torch::ScalarType type) {
  for (const auto& [t, name] : kDtypes) {
    if (t == type) return name;
  }
  throw UsageError(detail::concat("checkpoint: tensors of dtype ", type, " cannot be stored"));
}

torch::ScalarType dtype_from_name(const std::string& name) {
  for (const auto& [t, n] : kDtypes) {
    if (name == n) return t;
  }
  throw UsageError("checkpoint: unknown dtype '" + name + "'");
}

std::vector<ReplicatedEntry> replicated_entries(const engine::ZeroEngine& engine) {
  std::vector<ReplicatedEntry> out;
  const auto& r = engine.replicated();
  for (const auto* list : {&r.frozen(), &r.buffers()}) {
    const std::string kind = list == &r.frozen() ? "frozen" : "buffer";
    for (const auto& [name, t] : *list) {
      out.push_back({name, kind, dtype_name(t.scalar_type()), t.sizes().vec(),
                     static_cast<uint64_t>(t.nbytes())});
    }
  }
  return out;
}

nlohmann::json replicated_to_json(const std::vector<ReplicatedEntry>& entries) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& e : entries) {
    j.push_back({{"name", e.name},
                 {"kind", e.kind},
                 {"dtype", e.dtype},
                 {"shape", e.shape},
                 {"bytes", e.bytes}});
  }
  return j;
}

std::vector<ReplicatedEntry> replicated_from_json(const nlohmann::json& j,
                                                  const std::string& path) {
  std::vector<ReplicatedEntry> out;
  for (const auto& e : j) {
    ReplicatedEntry r{e.at("name").get<std::string>(), e.at("kind").get<std::string>(),
                      e.at("dtype").get<std::string>(), e.at("shape").get<std::vector<int64_t>>(),
                      e.at("bytes").get<uint64_t>()};
    int64_t numel = 1;
    for (int64_t d : r.shape) numel *= d;
    const auto elem = torch::elementSize(dtype_from_name(r.dtype));
    ZOFF_CHECK_ARG((r.kind == "frozen" || r.kind == "buffer") && numel >= 0 &&
                       r.bytes == static_cast<uint64_t>(numel) * elem,
                   path, ": replicated tensor ", r.name, " is malformed");
    out.push_back(std::move(r));
  }
  return out;
}

void add_replicated_sections(const engine::ZeroEngine& engine, RankFileHeader* header) {
  for (const auto& [name, t] : engine.replicated().all()) {
    ZOFF_CHECK(t.is_contiguous(), "replicated tensor ", name, " is not contiguous");
    header->sections.push_back({section_name(name),
                                dtype_name(t.scalar_type()),
                                0,
                                static_cast<uint64_t>(t.nbytes()),
                                t.data_ptr(),
                                {}});
  }
}

void check_replicated_sections(const std::vector<ReplicatedEntry>& entries,
                               const RankFileHeader& header, const std::string& path) {
  for (const auto& e : entries) {
    const auto& s = header.section(section_name(e.name), path);
    ZOFF_CHECK_ARG(s.dtype == e.dtype && s.bytes == e.bytes, path, ": section '", s.name, "' is ",
                   s.dtype, " of ", s.bytes, " bytes, meta.json says ", e.dtype, " of ", e.bytes);
  }
}

void check_replicated_match(const std::vector<ReplicatedEntry>& entries,
                            const engine::ZeroEngine& engine, const std::string& where) {
  const auto mine = replicated_entries(engine);
  ZOFF_CHECK_ARG(entries.size() == mine.size(), where, " holds ", entries.size(),
                 " frozen parameters and buffers, this model has ", mine.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    ZOFF_CHECK_ARG(entries[i].name == mine[i].name && entries[i].shape == mine[i].shape, where,
                   ": replicated tensor ", i, " is ", entries[i].name, ", this model has ",
                   mine[i].name, " (or another shape)");
  }
}

torch::Tensor read_replicated(int fd, const std::string& path, const RankFileHeader& header,
                              const ReplicatedEntry& entry) {
  const auto& s = header.section(section_name(entry.name), path);
  auto t = torch::empty(entry.shape, torch::TensorOptions().dtype(dtype_from_name(entry.dtype)));
  ZOFF_CHECK_ARG(static_cast<uint64_t>(t.nbytes()) == s.bytes, path, ": section '", s.name,
                 "' has ", s.bytes, " bytes for shape ", t.sizes());
  read_exact(fd, path, header.data_start + s.offset, t.data_ptr(), s.bytes);
  return t;
}

}  // namespace zoff::checkpoint
