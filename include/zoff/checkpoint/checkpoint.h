// Sharded training checkpoints: save a ZeroEngine's model states to a directory, resume
// from it bit-exactly, and find the newest checkpoint of a run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zoff/checkpoint/replicated_sections.h"
#include "zoff/engine/zero_engine.h"
#include "zoff/partition/flat_layout.h"
#include "zoff/partition/model_layout.h"

namespace zoff::checkpoint {

// A checkpoint is a directory:
//   rank_<r>.bin  one per rank, see rank_file.h: that rank's shard of the fp32 parameters
//                 and of every optimizer state, a copy of the frozen parameters and
//                 buffers (replicated_sections.h), and its LibTorch CPU RNG state
//   meta.json     written last by rank 0; its presence means the checkpoint is complete.
//                 Holds the format version, step, world size, ZeRO stage, config (normalized:
//                 every key at the value the engine ran with), model,
//                 preset, seed, flat layout, optimizer type and state names, data position,
//                 rank 0's RNG state (hex) and the CRC32 and length of every rank file.
// save_checkpoint writes <root>/step_<step>.tmp/, swaps it in as <root>/step_<step>/ and then
// updates <root>/latest, a one-line file naming the newest complete step directory (see
// step_directory.h). Files go through temporary names, fsync and rename: a crash mid-save
// leaves the old step directories and the old `latest` as they were.
// Version 2: parameters in units, each sharded across ranks (meta.json's layout.regions).
inline constexpr int kCheckpointFormatVersion = 2;
inline constexpr const char* kMetaFileName = "meta.json";
inline constexpr const char* kLatestFileName = "latest";

struct RankFileEntry {
  std::string name;  // "rank_<r>.bin"
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

struct CheckpointInfo {
  // --- The run's identity: given by the caller to save_checkpoint, and to load_checkpoint
  // as the expected values (a difference is an error).
  std::string model;    // e.g. "gpt"
  std::string preset;   // e.g. "tiny"; "" = the model's default
  int64_t context = 0;  // gpt --context; 0 = the preset's
  uint64_t seed = 0;    // weights and data order

  // --- Filled from the checkpoint by read_checkpoint_info / load_checkpoint (save takes
  // them from the engine; the caller leaves them alone).
  std::string dir;  // the checkpoint directory (the step dir, not the root)
  // The config the engine ran with, normalized (config::normalized_config_json: every key at
  // its effective value), as stored in meta.json (compact JSON, keys sorted); not compared
  // on resume.
  std::string config_text;
  int format_version = kCheckpointFormatVersion;
  int64_t step = 0;           // optimizer steps done; also the data position (see below)
  int64_t applied_steps = 0;  // steps that updated the parameters (fp16 skips the others);
                              // drives the lr schedule and the optimizer's step count
  // fp16 dynamic loss scaling state at the save (0 when the run had no loss scaler).
  double loss_scale = 0.0;
  int loss_scale_hysteresis_left = 0;
  int64_t loss_scale_clean_steps = 0;
  int world_size = 1;
  int zero_stage = 0;
  int64_t train_batch_size = 0;  // samples per step: data position = step * this
  std::string optimizer_type;
  std::vector<std::string> state_names;  // optimizer state buffers, in file order
  // How the states are stored (optimizer.state_dtype: fp32, bf16, int8; "fp32" in files
  // from before the key) and each state section's rank-file dtype, parallel to state_names
  // (int8: "exp_avg" I8, "exp_avg.scales" F32, ...).
  std::string state_dtype = "fp32";
  std::vector<std::string> state_dtypes;
  std::vector<partition::ParamSlot> slots;
  // Frozen parameters and buffers (every rank file holds them), and the second names of
  // tied tensors: (name, first name).
  std::vector<ReplicatedEntry> replicated;
  std::vector<std::pair<std::string, std::string>> aliases;
  int64_t numel = 0;         // parameters (elements)
  int64_t padded_numel = 0;  // numel rounded up to a multiple of world_size
  // How the flat buffer splits into the ranks' shard spaces (see partition::ShardRegion).
  std::vector<partition::ShardRegion> regions;
  std::vector<uint8_t> rng_state;  // LibTorch's default CPU generator: rank 0's at save, this
                                   // rank's after load_checkpoint
  std::vector<RankFileEntry> files;

  int64_t shard_size() const { return padded_numel / world_size; }
};

// Collective (every rank calls it; it calls engine.synchronize() first, so a delayed
// parameter update in flight is finished). Writes the engine's state at engine.global_step() to
// <root_dir>/step_<step>/ and points <root_dir>/latest at it. Returns that directory.
// Re-saving an existing step replaces it atomically only once the new one is complete.
// Leftovers of killed saves (step_<N>.tmp, latest.tmp) are removed first. An I/O failure on
// any rank is a zoff::Error on every rank and leaves the committed checkpoints and `latest`
// as they were.
std::string save_checkpoint(engine::ZeroEngine& engine, const std::string& root_dir,
                            const CheckpointInfo& run);

// Collective (calls engine.synchronize() first). Loads the checkpoint at `dir_or_root` (a
// checkpoint directory, or a root whose `latest` names one) into the engine: checks meta.json
// against the engine and `expected` (world size, ZeRO stage, optimizer type and states, layout,
// model, preset, seed), checks this rank's file (length and CRC32 as in meta.json, header), and
// only when every rank has passed every check writes the shards into the engine, restores this
// rank's LibTorch CPU RNG state and calls engine.restore_from_shards(step). A failed check is a
// zoff::UsageError naming the file or value, on every rank, with the engine untouched.
CheckpointInfo load_checkpoint(engine::ZeroEngine& engine, const std::string& dir_or_root,
                               const CheckpointInfo& expected);

// The checkpoint directory `dir_or_root` stands for: itself when it holds meta.json, else
// the directory its `latest` file names (which must hold meta.json). UsageError otherwise.
std::string resolve_checkpoint_dir(const std::string& dir_or_root);

// True when resolve_checkpoint_dir would succeed (for "resume if there is something").
bool has_checkpoint(const std::string& dir_or_root);

// Parses meta.json of the resolved directory (no rank files are read).
CheckpointInfo read_checkpoint_info(const std::string& dir_or_root);

// LibTorch's default CPU generator state (torch.get_rng_state() in Python), and back.
std::vector<uint8_t> torch_rng_state();
void set_torch_rng_state(const std::vector<uint8_t>& state);

}  // namespace zoff::checkpoint
