// What a checkpoint keeps besides the sharded master and optimizer states: frozen
// parameters, module buffers (in their own dtype) and the second names of tied tensors.
#pragma once

#include <torch/torch.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "zoff/checkpoint/rank_file.h"
#include "zoff/engine/zero_engine.h"

namespace zoff::checkpoint {

// One replicated tensor: equal on every rank, so every rank file holds a copy (its own
// rank reads it back without opening another file). Section "replicated.<name>".
struct ReplicatedEntry {
  std::string name;   // as in named_parameters() / named_buffers()
  std::string kind;   // "frozen" | "buffer"
  std::string dtype;  // safetensors name: F32, BF16, F16, F64, I64, I32, I16, I8, U8, BOOL
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
};

// safetensors dtype names for LibTorch scalar types, and back (UsageError when unknown).
std::string dtype_name(torch::ScalarType type);
torch::ScalarType dtype_from_name(const std::string& name);

std::vector<ReplicatedEntry> replicated_entries(const engine::ZeroEngine& engine);
nlohmann::json replicated_to_json(const std::vector<ReplicatedEntry>& entries);
// Throws UsageError naming `path` on a malformed entry.
std::vector<ReplicatedEntry> replicated_from_json(const nlohmann::json& j, const std::string& path);

// Adds the engine's replicated tensors as sections (pointing at the live tensors).
void add_replicated_sections(const engine::ZeroEngine& engine, RankFileHeader* header);
// Every entry has its section, of the right size: else a UsageError naming `path`.
void check_replicated_sections(const std::vector<ReplicatedEntry>& entries,
                               const RankFileHeader& header, const std::string& path);
// The checkpoint's entries match the engine's names and shapes (the dtype may differ: the
// values are converted on load). UsageError naming the first difference.
void check_replicated_match(const std::vector<ReplicatedEntry>& entries,
                            const engine::ZeroEngine& engine, const std::string& where);
// Reads one entry from an open rank file as a new tensor of its stored dtype and shape.
torch::Tensor read_replicated(int fd, const std::string& path, const RankFileHeader& header,
                              const ReplicatedEntry& entry);

}  // namespace zoff::checkpoint
