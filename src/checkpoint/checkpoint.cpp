// save_checkpoint / load_checkpoint: every rank writes or reads its shard file, rank 0 the
// meta.json that makes the directory a checkpoint.
#include "zoff/checkpoint/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>

#include "reshard.h"
#include "zoff/checkpoint/atomic_file.h"
#include "zoff/checkpoint/rank_file.h"
#include "zoff/checkpoint/step_directory.h"
#include "zoff/config/config_json.h"
#include "zoff/core/error.h"
#include "zoff/optim/state_dtype.h"

namespace zoff::checkpoint {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::string join(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

// True for an int8 state's block scales ("<state>.scales").
bool is_scales_section(const std::string& name) {
  const std::string suffix = ".scales";
  return name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Elements of a state section over a shard of `shard_size` elements: int8 scales have one
// per optim::kStateBlock elements, everything else one each.
int64_t state_section_numel(const std::string& name, int64_t shard_size) {
  return is_scales_section(name)
             ? static_cast<int64_t>(optim::state_blocks(static_cast<size_t>(shard_size)))
             : shard_size;
}

// True when some state section dtype is one of int8 codes.
bool has_int8_codes(const std::vector<std::string>& dtypes) {
  return std::any_of(dtypes.begin(), dtypes.end(), engine::is_int8_code_dtype);
}

// Int8 codes decode only with the map that wrote them. Checkpoints before the map had a name
// (zoff before 2026-11-25) used the true square root ("sqrt").
void check_int8_map(const nlohmann::json& optimizer, const std::vector<std::string>& dtypes,
                    const std::string& path) {
  if (!has_int8_codes(dtypes)) return;
  const auto map = optimizer.value("int8_map", std::string("sqrt"));
  ZOFF_CHECK_ARG(
      map == optim::kInt8MapName, path, ": int8 optimizer states in map '", map,
      "', this zoff reads '", optim::kInt8MapName,
      "': load it with the zoff that wrote it and optimizer.state_dtype fp32, then save it again");
}

std::string rank_file_name(int rank) { return "rank_" + std::to_string(rank) + ".bin"; }

std::string to_hex(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    s.push_back(digits[b >> 4]);
    s.push_back(digits[b & 15]);
  }
  return s;
}

std::vector<uint8_t> from_hex(const std::string& s, const std::string& where) {
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw UsageError(where + ": torch_rng_state is not lower-case hex");
  };
  ZOFF_CHECK_ARG(s.size() % 2 == 0, where, ": torch_rng_state has an odd number of hex digits");
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<uint8_t>(nibble(s[2 * i]) * 16 + nibble(s[2 * i + 1]));
  }
  return out;
}

// Every rank learns whether any rank failed. The failing rank rethrows its own exception;
// the others throw saying which rank failed (its own message is printed by that rank).
void agree_or_throw(dist::Comm& comm, std::exception_ptr mine, const std::string& what,
                    bool usage) {
  auto failed = torch::zeros({comm.size()}, torch::kInt64);
  if (mine) failed[comm.rank()] = 1;
  comm.all_reduce_sum(failed)->wait();
  if (mine) std::rethrow_exception(mine);
  for (int r = 0; r < comm.size(); ++r) {
    if (failed[r].item<int64_t>() != 0) {
      const std::string msg = detail::concat(what, ": failed on rank ", r, " (see its error)");
      if (usage) throw UsageError(msg);
      throw Error(msg);
    }
  }
}

// CRC32 of meta.json's fields without "meta_crc32" itself, in file order, dumped compactly:
// a field edited after the save (say "preset": "xl") no longer matches.
uint32_t meta_checksum(ojson j) {
  j.erase("meta_crc32");
  const std::string text = j.dump();
  return static_cast<uint32_t>(
      ::crc32(0, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size())));
}

// meta.json's "optimizer": type, state dtype, and each state's name and stored dtype.
ojson optimizer_json(const optim::OptimizerOptions& optimizer,
                     const std::vector<engine::StateSection>& states) {
  std::vector<std::string> names, dtypes;
  for (const auto& sec : states) {
    names.push_back(sec.name);
    dtypes.push_back(sec.dtype);
  }
  ojson o = {{"type", optimizer.type},
             {"state_dtype", optimizer.state_dtype},
             {"state_names", names},
             {"state_dtypes", dtypes}};
  // Which int8 map the codes are in (state_dtype.h): a reader with another one refuses them.
  if (has_int8_codes(dtypes)) o["int8_map"] = optim::kInt8MapName;
  return o;
}

// meta.json's "layout": sizes, units, regions and every parameter's slot in the flat buffer.
ojson layout_json(const partition::ModelLayout& layout) {
  ojson slots = ojson::array();
  for (const auto& s : layout.slots()) {
    slots.push_back({{"name", s.name},
                     {"offset", s.offset},
                     {"numel", s.numel},
                     {"shape", s.shape},
                     {"module_index", s.module_index}});
  }
  ojson regions = ojson::array();
  for (const auto& r : layout.regions()) {
    regions.push_back({{"offset", r.offset},
                       {"padded_numel", r.padded_numel},
                       {"shard_size", r.shard_size},
                       {"shard_offset", r.shard_offset}});
  }
  ojson units = ojson::array();
  for (const auto& u : layout.units()) units.push_back(u.name);
  return {{"numel", layout.numel()},
          {"padded_numel", layout.padded_numel()},
          {"shard_size", layout.shard_size()},
          {"units", units},
          {"regions", regions},
          {"slots", slots}};
}

// meta.json's "files": each rank file's name, size and checksum, in rank order.
ojson files_json(const std::vector<RankFileEntry>& files) {
  ojson fj = ojson::array();
  for (size_t r = 0; r < files.size(); ++r) {
    fj.push_back({{"name", files[r].name},
                  {"rank", r},
                  {"bytes", files[r].bytes},
                  {"crc32", files[r].crc32}});
  }
  return fj;
}

std::string meta_json_text(const engine::ZeroEngine& engine, const CheckpointInfo& run,
                           const std::vector<engine::StateSection>& states,
                           const std::vector<RankFileEntry>& files) {
  const auto& cfg = engine.config();
  ojson j;
  j["format"] = "zoff-checkpoint";
  j["format_version"] = kCheckpointFormatVersion;
  j["step"] = engine.global_step();
  j["applied_steps"] = engine.applied_steps();
  if (const auto* scaler = engine.loss_scaler()) {
    const auto st = scaler->state();
    j["loss_scaler"] = {{"scale", st.scale},
                        {"hysteresis_left", st.hysteresis_left},
                        {"clean_steps", st.clean_steps}};
  }
  j["world_size"] = engine.comm()->size();
  j["zero_stage"] = cfg.zero.stage;
  j["model"] = run.model;
  j["preset"] = run.preset;
  if (run.context != 0) j["context"] = run.context;  // absent: the preset's (older files too)
  j["seed"] = run.seed;
  j["optimizer"] = optimizer_json(cfg.optimizer, states);
  // The data sampler is a pure function of (seed, step): the step is the data position.
  j["data"] = {{"seed", run.seed},
               {"step", engine.global_step()},
               {"train_batch_size", cfg.train_batch_size},
               {"samples_seen", engine.global_step() * cfg.train_batch_size}};
  j["layout"] = layout_json(engine.layout());
  j["replicated"] = replicated_to_json(replicated_entries(engine));
  ojson aliases = ojson::object();
  for (const auto& [name, first] : engine.aliases()) aliases[name] = first;
  j["aliases"] = aliases;
  j["torch_rng_state"] = to_hex(torch_rng_state());
  j["files"] = files_json(files);
  // Normalized, not the file as given: every key at the value the engine ran with, and a
  // size bounded whatever the user's file held (a 50 MB config once made an 85 MB meta.json).
  j["config"] = ojson::parse(config::normalized_config_json(cfg));
  j["meta_crc32"] = meta_checksum(j);
  return j.dump(2) + "\n";
}

// This rank's shard file: master, optimizer states, RNG state.
FileDigest write_this_rank(engine::ZeroEngine& engine, const std::string& dir,
                           const std::vector<uint8_t>& rng) {
  const int rank = engine.comm()->rank();
  const auto shard = engine.shard();
  RankFileHeader h;
  h.rank = rank;
  h.world = engine.comm()->size();
  h.step = engine.global_step();
  h.shard_offset = shard.offset;
  h.shard_size = shard.size;
  // Master first, then the optimizer's states as stored, streamed from wherever they live.
  for (auto& sec : engine.state_sections()) {
    ZOFF_CHECK(sec.numel == state_section_numel(sec.name, shard.size), "engine state ", sec.name,
               " has ", sec.numel, " elements, the shard ", shard.size);
    auto read = sec.read;
    const size_t elem = engine::section_element_bytes(sec.dtype);
    RankFileSection out;
    out.name = sec.name == "master" ? "master" : "optim." + sec.name;
    out.dtype = sec.dtype;
    out.bytes = static_cast<uint64_t>(sec.numel) * elem;
    // Chunks are multiples of 4 bytes (kRankFileChunkBytes), so elements never split.
    out.source = [read, elem](uint64_t offset, void* dst, size_t bytes) {
      read(static_cast<int64_t>(offset / elem), static_cast<int64_t>(bytes / elem), dst);
    };
    h.sections.push_back(std::move(out));
  }
  add_replicated_sections(engine, &h);
  h.sections.push_back({"rng_state", "U8", 0, rng.size(), rng.data(), {}});
  run_save_fault_hook(rank, join(dir, rank_file_name(rank)));
  return write_rank_file(join(dir, rank_file_name(rank)), h);
}

// The optimizer's state sections (every section but the master), in file order.
std::vector<engine::StateSection> engine_states(engine::ZeroEngine& engine) {
  std::vector<engine::StateSection> states;
  for (auto& sec : engine.state_sections()) {
    if (sec.name != "master") states.push_back(std::move(sec));
  }
  return states;
}

std::vector<std::string> engine_state_names(engine::ZeroEngine& engine) {
  std::vector<std::string> names;
  for (const auto& sec : engine_states(engine)) names.push_back(sec.name);
  return names;
}

// State names without the int8 scale sections: what a state is, not how it is stored.
std::vector<std::string> base_state_names(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& n : names) {
    if (!is_scales_section(n)) out.push_back(n);
  }
  return out;
}

// Everything in meta.json that must match the engine and the run before loading.
void check_compatible(const CheckpointInfo& info, engine::ZeroEngine& engine,
                      const CheckpointInfo& expected) {
  const std::string where = "checkpoint " + info.dir;
  // Another world size or stage is fine: the values are found by parameter name
  // (reshard.cpp). What must match is the run's identity and the optimizer.
  // The data position is step x train_batch_size: another batch size would resume elsewhere.
  ZOFF_CHECK_ARG(info.train_batch_size == engine.config().train_batch_size, where,
                 " was written with train_batch_size ", info.train_batch_size,
                 ", this job's config has ", engine.config().train_batch_size,
                 ": resuming with another batch size is not supported");
  ZOFF_CHECK_ARG(info.optimizer_type == engine.config().optimizer.type, where, " has optimizer '",
                 info.optimizer_type, "', this job's config has '", engine.config().optimizer.type,
                 "'");
  // Another state dtype is converted while resharding (reshard.cpp): the same states,
  // each stored its own way (int8 ones with a ".scales" section beside them).
  ZOFF_CHECK_ARG(base_state_names(info.state_names) == base_state_names(engine_state_names(engine)),
                 where, " holds other optimizer states than this job's optimizer has");
  ZOFF_CHECK_ARG(info.model == expected.model, where, " is of model '", info.model,
                 "', this job trains '", expected.model, "'");
  ZOFF_CHECK_ARG(info.preset == expected.preset, where, " is of preset '", info.preset,
                 "', this job has '", expected.preset, "'");
  ZOFF_CHECK_ARG(info.context == expected.context, where, " was trained with --context ",
                 info.context, ", this job has ", expected.context, " (0 = the preset's)");
  ZOFF_CHECK_ARG(info.seed == expected.seed, where, " was trained with seed ", info.seed,
                 ", this job has seed ", expected.seed, " (the data order would change)");
  check_same_parameters(info, engine);
  check_replicated_match(info.replicated, engine, where);
}

// meta.json's "layout": sizes, unit regions and parameter slots.
void read_layout(const nlohmann::json& layout, const std::string& path, CheckpointInfo* info) {
  info->numel = layout.at("numel").get<int64_t>();
  info->padded_numel = layout.at("padded_numel").get<int64_t>();
  for (const auto& r : layout.at("regions")) {
    info->regions.push_back({r.at("offset").get<int64_t>(), r.at("padded_numel").get<int64_t>(),
                             r.at("shard_size").get<int64_t>(),
                             r.at("shard_offset").get<int64_t>()});
  }
  for (const auto& s : layout.at("slots")) {
    partition::ParamSlot slot;
    slot.name = s.at("name").get<std::string>();
    slot.offset = s.at("offset").get<int64_t>();
    slot.numel = s.at("numel").get<int64_t>();
    slot.shape = s.at("shape").get<std::vector<int64_t>>();
    slot.module_index = s.at("module_index").get<size_t>();
    ZOFF_CHECK_ARG(
        slot.offset >= 0 && slot.numel >= 0 && slot.offset + slot.numel <= info->padded_numel, path,
        ": parameter ", slot.name, " lies outside the layout");
    info->slots.push_back(slot);
  }
}

// The regions tile the flat buffer and every rank's shard space exactly.
void check_regions(const CheckpointInfo& info, const std::string& path) {
  int64_t offset = 0, space = 0;
  for (const auto& r : info.regions) {
    ZOFF_CHECK_ARG(r.offset == offset && r.shard_offset == space && r.shard_size >= 0 &&
                       r.shard_size * info.world_size == r.padded_numel,
                   path, ": layout region at element ", r.offset, " does not tile the buffer");
    offset += r.padded_numel;
    space += r.shard_size;
  }
  ZOFF_CHECK_ARG(offset == info.padded_numel && space == info.shard_size(), path,
                 ": layout regions cover ", offset, " of ", info.padded_numel, " elements");
}

}  // namespace

// Checks rank `rank`'s file completely (length, CRC32, header, sections) and returns its
// header.
RankFileHeader verify_rank_file_of(const CheckpointInfo& info, int rank) {
  const auto& entry = info.files.at(static_cast<size_t>(rank));
  const std::string path = join(info.dir, entry.name);
  struct stat st {};
  ZOFF_CHECK_ARG(::stat(path.c_str(), &st) == 0, path, ": missing (", std::strerror(errno), ")");
  const auto bytes = static_cast<uint64_t>(st.st_size);
  ZOFF_CHECK_ARG(bytes == entry.bytes, path, ": ", bytes, " bytes, meta.json says ", entry.bytes,
                 bytes < entry.bytes ? " (truncated)" : "");
  const auto digest = digest_file(path);
  ZOFF_CHECK_ARG(digest.bytes == entry.bytes, path, ": changed while being read");
  ZOFF_CHECK_ARG(digest.crc32 == entry.crc32, path, ": corrupt (CRC32 ", digest.crc32,
                 ", meta.json says ", entry.crc32, ")");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ZOFF_CHECK_ARG(fd >= 0, "cannot read ", path, ": ", std::strerror(errno));
  RankFileHeader h;
  try {
    h = read_rank_file_header(fd, path, bytes);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  ZOFF_CHECK_ARG(h.rank == rank && h.world == info.world_size && h.step == info.step &&
                     h.shard_size == info.shard_size(),
                 path, ": header says rank ", h.rank, " of ", h.world, ", step ", h.step,
                 ", shard of ", h.shard_size, "; meta.json says rank ", rank, " of ",
                 info.world_size, ", step ", info.step, ", shard of ", info.shard_size());
  std::vector<std::pair<std::string, std::string>> needed{{"master", "F32"}};
  for (size_t i = 0; i < info.state_names.size(); ++i) {
    needed.emplace_back(info.state_names[i], info.state_dtypes.at(i));
  }
  for (const auto& [n, dtype] : needed) {
    const std::string name = n == "master" ? n : "optim." + n;
    const auto& s = h.section(name, path);
    const uint64_t bytes = static_cast<uint64_t>(state_section_numel(n, h.shard_size)) *
                           engine::section_element_bytes(dtype);
    ZOFF_CHECK_ARG(s.dtype == dtype && s.bytes == bytes, path, ": section '", name, "' is ",
                   s.dtype, " of ", s.bytes, " bytes, expected ", dtype, " of ", bytes);
  }
  check_replicated_sections(info.replicated, h, path);
  const auto& rng = h.section("rng_state", path);
  ZOFF_CHECK_ARG(rng.bytes == torch_rng_state().size(), path, ": rng_state has ", rng.bytes,
                 " bytes, this LibTorch's generator state has ", torch_rng_state().size());
  return h;
}

namespace {

// This rank's file, written at this job's world size and layout.
RankFileHeader verify_rank_file(const CheckpointInfo& info, engine::ZeroEngine& engine) {
  const int rank = engine.comm()->rank();
  RankFileHeader h = verify_rank_file_of(info, rank);
  const auto shard = engine.shard();
  ZOFF_CHECK_ARG(h.shard_offset == shard.offset && h.shard_size == shard.size, "checkpoint ",
                 info.dir, ": rank ", rank, "'s shard is [", h.shard_offset, ", +", h.shard_size,
                 "), this job's is [", shard.offset, ", +", shard.size, ")");
  return h;
}

// Frozen parameters and buffers, converted to the engine's dtype where it differs.
void read_replicated_into(int fd, const std::string& path, const RankFileHeader& h,
                          const std::vector<ReplicatedEntry>& entries, engine::ZeroEngine& engine) {
  torch::NoGradGuard no_grad;
  const auto targets = engine.replicated().all();
  for (size_t i = 0; i < entries.size(); ++i) {
    targets.at(i).second.copy_(read_replicated(fd, path, h, entries[i]));
  }
}

// Streams one section of a rank file into an engine state section, chunk by chunk.
void read_section_into(int fd, const std::string& path, const RankFileHeader& h,
                       const std::string& name, const engine::StateSection& sec) {
  const auto& s = h.section(name, path);
  const size_t elem = engine::section_element_bytes(sec.dtype);
  ZOFF_CHECK_ARG(s.dtype == sec.dtype && s.bytes == static_cast<uint64_t>(sec.numel) * elem, path,
                 ": section ", name, " is ", s.dtype, " of ", s.bytes, " bytes, expected ",
                 sec.dtype, " of ", static_cast<uint64_t>(sec.numel) * elem);
  const int64_t chunk = static_cast<int64_t>(kRankFileChunkBytes / elem);
  std::vector<char> buf(static_cast<size_t>(std::min(chunk, sec.numel)) * elem);
  for (int64_t at = 0; at < sec.numel; at += chunk) {
    const int64_t n = std::min(chunk, sec.numel - at);
    read_exact(fd, path, h.data_start + s.offset + static_cast<uint64_t>(at) * elem, buf.data(),
               static_cast<size_t>(n) * elem);
    sec.write(at, n, buf.data());
  }
}

// Reads the verified file straight into the engine's shards (in chunks: no second copy).
std::vector<uint8_t> read_into_engine(const CheckpointInfo& info, const RankFileHeader& h,
                                      engine::ZeroEngine& engine) {
  const std::string path = join(info.dir, info.files.at(static_cast<size_t>(h.rank)).name);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ZOFF_CHECK(fd >= 0, "cannot read ", path, ": ", std::strerror(errno));
  std::vector<uint8_t> rng;
  try {
    for (auto& sec : engine.state_sections()) {
      read_section_into(fd, path, h, sec.name == "master" ? "master" : "optim." + sec.name, sec);
    }
    read_replicated_into(fd, path, h, info.replicated, engine);
    const auto& s = h.section("rng_state", path);
    rng.resize(s.bytes);
    read_exact(fd, path, h.data_start + s.offset, rng.data(), s.bytes);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return rng;
}

}  // namespace

std::vector<uint8_t> torch_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  at::Tensor state;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    state = gen.get_state();
  }
  state = state.contiguous();
  const auto* p = state.data_ptr<uint8_t>();
  return std::vector<uint8_t>(p, p + state.numel());
}

void set_torch_rng_state(const std::vector<uint8_t>& bytes) {
  auto gen = at::detail::getDefaultCPUGenerator();
  auto state = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(state.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  std::lock_guard<std::mutex> lock(gen.mutex());
  try {
    gen.set_state(state);
  } catch (const c10::Error& e) {
    throw UsageError(detail::concat("torch RNG state of ", bytes.size(),
                                    " bytes rejected: ", e.what_without_backtrace()));
  }
}

std::string resolve_checkpoint_dir(const std::string& dir_or_root) {
  std::error_code ec;
  ZOFF_CHECK_ARG(fs::is_directory(dir_or_root, ec), "checkpoint directory ", dir_or_root,
                 " does not exist");
  if (fs::exists(join(dir_or_root, kMetaFileName), ec)) return dir_or_root;
  const std::string latest = join(dir_or_root, kLatestFileName);
  ZOFF_CHECK_ARG(fs::exists(latest, ec), dir_or_root, ": not a checkpoint (no ", kMetaFileName,
                 ": incomplete or not one) and no '", kLatestFileName, "' file");
  std::string name = read_text_file(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  ZOFF_CHECK_ARG(!name.empty() && name.find('/') == std::string::npos, latest,
                 ": does not name a step directory");
  const std::string dir = join(dir_or_root, name);
  ZOFF_CHECK_ARG(fs::exists(join(dir, kMetaFileName), ec), latest, " names ", dir,
                 ", which has no ", kMetaFileName, " (incomplete checkpoint)");
  return dir;
}

bool has_checkpoint(const std::string& dir_or_root) {
  try {
    resolve_checkpoint_dir(dir_or_root);
    return true;
  } catch (const UsageError&) {
    return false;
  }
}

namespace {

// The meta file's identity: zoff's format, its checksum over the contents in file order, and
// the format version this zoff reads.
void check_meta_identity(const nlohmann::json& j, const std::string& text, const std::string& path,
                         CheckpointInfo* info) {
  ZOFF_CHECK_ARG(j.at("format").get<std::string>() == "zoff-checkpoint", path,
                 ": not a zoff checkpoint");
  ZOFF_CHECK_ARG(j.contains("meta_crc32"), path, ": no meta_crc32 checksum (an older zoff?)");
  const uint32_t crc = meta_checksum(ojson::parse(text));  // in file order
  ZOFF_CHECK_ARG(j.at("meta_crc32").get<uint32_t>() == crc, path,
                 ": checksum mismatch (meta_crc32 ", j.at("meta_crc32").get<uint32_t>(),
                 ", contents ", crc, "): the file was changed after it was saved");
  info->format_version = j.at("format_version").get<int>();
  ZOFF_CHECK_ARG(info->format_version == kCheckpointFormatVersion, path, ": format version ",
                 info->format_version, ", this zoff reads version ", kCheckpointFormatVersion);
}

// The step counters and the fp16 loss scaler's state.
void read_progress(const nlohmann::json& j, CheckpointInfo* info) {
  info->step = j.at("step").get<int64_t>();
  info->applied_steps = j.at("applied_steps").get<int64_t>();
  if (j.contains("loss_scaler")) {
    const auto& ls = j.at("loss_scaler");
    info->loss_scale = ls.at("scale").get<double>();
    info->loss_scale_hysteresis_left = ls.at("hysteresis_left").get<int>();
    info->loss_scale_clean_steps = ls.at("clean_steps").get<int64_t>();
  }
}

// "optimizer": its type, its states' names and how each is stored (fp32 before state dtypes).
void read_optimizer_meta(const nlohmann::json& o, const std::string& path, CheckpointInfo* info) {
  info->optimizer_type = o.at("type").get<std::string>();
  info->state_names = o.at("state_names").get<std::vector<std::string>>();
  info->state_dtype = o.value("state_dtype", std::string("fp32"));
  info->state_dtypes =
      o.value("state_dtypes", std::vector<std::string>(info->state_names.size(), "F32"));
  ZOFF_CHECK_ARG(info->state_dtypes.size() == info->state_names.size(), path,
                 ": optimizer.state_dtypes does not match state_names");
  check_int8_map(o, info->state_dtypes, path);
}

// The rank files: one per rank, named in rank order, with their sizes and checksums.
void read_rank_files(const nlohmann::json& files, const std::string& path, CheckpointInfo* info) {
  for (const auto& f : files) {
    info->files.push_back({f.at("name").get<std::string>(), f.at("bytes").get<uint64_t>(),
                           f.at("crc32").get<uint32_t>()});
  }
  ZOFF_CHECK_ARG(info->files.size() == static_cast<size_t>(info->world_size), path, ": lists ",
                 info->files.size(), " rank files for world size ", info->world_size);
  for (size_t r = 0; r < info->files.size(); ++r) {
    ZOFF_CHECK_ARG(info->files[r].name == rank_file_name(static_cast<int>(r)), path, ": file ", r,
                   " is named '", info->files[r].name, "'");
  }
}

void read_meta(const nlohmann::json& j, const std::string& text, const std::string& path,
               CheckpointInfo* info) {
  check_meta_identity(j, text, path, info);
  read_progress(j, info);
  info->world_size = j.at("world_size").get<int>();
  info->zero_stage = j.at("zero_stage").get<int>();
  info->model = j.at("model").get<std::string>();
  info->preset = j.at("preset").get<std::string>();
  info->context = j.value("context", int64_t{0});
  info->seed = j.at("seed").get<uint64_t>();
  read_optimizer_meta(j.at("optimizer"), path, info);
  info->train_batch_size = j.at("data").at("train_batch_size").get<int64_t>();
  read_layout(j.at("layout"), path, info);
  info->replicated = replicated_from_json(j.at("replicated"), path);
  for (const auto& [name, first] : j.at("aliases").items()) {
    info->aliases.emplace_back(name, first.get<std::string>());
  }
  info->rng_state = from_hex(j.at("torch_rng_state").get<std::string>(), path);
  ZOFF_CHECK_ARG(info->world_size >= 1 && info->padded_numel % info->world_size == 0, path,
                 ": world_size ", info->world_size, " does not divide padded_numel ",
                 info->padded_numel);
  read_rank_files(j.at("files"), path, info);
  if (j.contains("config") && !j.at("config").is_null()) {
    info->config_text =
        j.at("config").is_string() ? j.at("config").get<std::string>() : j.at("config").dump();
  }
}

}  // namespace

CheckpointInfo read_checkpoint_info(const std::string& dir_or_root) {
  CheckpointInfo info;
  info.dir = resolve_checkpoint_dir(dir_or_root);
  const std::string path = join(info.dir, kMetaFileName);
  const std::string text = read_text_file(path);
  try {
    read_meta(nlohmann::json::parse(text), text, path, &info);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(detail::concat(path, ": corrupt: ", e.what()));
  }
  check_regions(info, path);
  return info;
}

namespace {

// Rank 0, before anyone writes: the root exists, leftovers of killed saves are gone, and the
// staging directory is new and empty.
void prepare_staging(const std::string& root_dir, const std::string& staged) {
  std::error_code ec;
  fs::create_directories(root_dir, ec);
  ZOFF_CHECK(fs::is_directory(root_dir), "cannot create checkpoint directory ", root_dir, ": ",
             ec.message());
  remove_save_leftovers(root_dir);
  ZOFF_CHECK(fs::create_directory(staged, ec) && !ec, "cannot create ", staged, ": ", ec.message());
}

// Rank 0, once every rank file is in `staged`: meta.json (the directory's commit point), the
// swap into step_<N>, then `latest`.
void commit_staged(engine::ZeroEngine& engine, const std::string& root_dir,
                   const std::string& staged, const CheckpointInfo& run,
                   const std::vector<RankFileEntry>& files) {
  const std::string meta = join(staged, kMetaFileName);
  run_save_fault_hook(0, meta);
  write_file_atomically(meta, meta_json_text(engine, run, engine_states(engine), files));
  const std::string name = step_dir_name(engine.global_step());
  swap_in_step(staged, join(root_dir, name), root_dir);
  run_save_fault_hook(0, join(root_dir, kLatestFileName));
  write_file_atomically(join(root_dir, kLatestFileName), name + "\n");
}

}  // namespace

// The save protocol. Every rank writes into <root>/step_<N>.tmp/; rank 0 writes meta.json
// there last, swaps the directory in as step_<N> with one rename (an atomic exchange when
// step_<N> exists: a resumed run saving the step it resumed from) and then rewrites
// `latest`. Nothing committed is touched before the new step is complete, so a failure or a
// kill at any point leaves `latest` naming a complete checkpoint; the next save removes the
// leftovers (step_<N>.tmp, latest.tmp).
std::string save_checkpoint(engine::ZeroEngine& engine, const std::string& root_dir,
                            const CheckpointInfo& run) {
  auto& comm = *engine.comm();
  // With delayed parameter update a step may still be in flight: finish it first.
  engine.synchronize();
  const std::string dir = join(root_dir, step_dir_name(engine.global_step()));
  const std::string staged = join(root_dir, staging_dir_name(engine.global_step()));
  const std::string what = "saving checkpoint " + dir;

  std::exception_ptr failure;
  try {
    if (comm.rank() == 0) prepare_staging(root_dir, staged);
  } catch (...) {
    failure = std::current_exception();
  }
  agree_or_throw(comm, failure, what, false);

  // Every rank writes its shard file; rank 0 learns their lengths and CRCs.
  const auto rng = torch_rng_state();
  FileDigest digest;
  try {
    std::error_code ec;
    fs::create_directories(staged, ec);  // exists on a shared file system; made elsewhere
    digest = write_this_rank(engine, staged, rng);
  } catch (...) {
    failure = std::current_exception();
  }
  auto mine = torch::tensor({failure ? int64_t{1} : int64_t{0}, static_cast<int64_t>(digest.crc32),
                             static_cast<int64_t>(digest.bytes)},
                            torch::kInt64);
  auto all = torch::empty({3 * comm.size()}, torch::kInt64);
  comm.all_gather(mine, all)->wait();
  agree_or_throw(comm, failure, what, false);

  if (comm.rank() == 0) {
    try {
      std::vector<RankFileEntry> files;
      for (int r = 0; r < comm.size(); ++r) {
        files.push_back({rank_file_name(r), static_cast<uint64_t>(all[3 * r + 2].item<int64_t>()),
                         static_cast<uint32_t>(all[3 * r + 1].item<int64_t>())});
      }
      commit_staged(engine, root_dir, staged, run, files);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree_or_throw(comm, failure, what, false);
  return dir;
}

CheckpointInfo load_checkpoint(engine::ZeroEngine& engine, const std::string& dir_or_root,
                               const CheckpointInfo& expected) {
  auto& comm = *engine.comm();
  engine.synchronize();  // no step in flight may write the shards after we do
  CheckpointInfo info;
  RankFileHeader header;
  bool reshard = false;
  std::exception_ptr failure;
  try {
    info = read_checkpoint_info(dir_or_root);
    check_compatible(info, engine, expected);
    reshard = needs_resharding(info, engine);
    if (!reshard) header = verify_rank_file(info, engine);
  } catch (...) {
    failure = std::current_exception();
  }
  // Nobody touches the engine unless every rank's checks passed.
  agree_or_throw(comm, failure, "loading checkpoint " + dir_or_root, true);
  if (reshard) {
    const std::string& dtype = engine.config().optimizer.state_dtype;
    if (info.state_dtype != dtype && comm.rank() == 0) {
      std::fprintf(stderr,
                   "zoff: note: checkpoint %s holds %s optimizer states; converting them to %s "
                   "(%s)\n",
                   info.dir.c_str(), info.state_dtype.c_str(), dtype.c_str(),
                   dtype == "fp32" ? "exact" : "rounded to the new format: not bitwise");
    }
    // The old files this rank needs are verified as they are opened.
    try {
      info.rng_state = read_resharded(info, engine);
    } catch (...) {
      failure = std::current_exception();
    }
    agree_or_throw(comm, failure, "loading checkpoint " + dir_or_root, true);
  } else {
    info.rng_state = read_into_engine(info, header, engine);
  }
  set_torch_rng_state(info.rng_state);
  engine.restore_from_shards(info.step, info.applied_steps);
  if (auto* scaler = engine.loss_scaler(); scaler != nullptr && info.loss_scale > 0.0) {
    scaler->set_state(
        {info.loss_scale, info.loss_scale_hysteresis_left, info.loss_scale_clean_steps});
  }
  return info;
}

}  // namespace zoff::checkpoint
