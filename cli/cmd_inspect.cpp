// `zoff inspect`: what a checkpoint holds (step, layout, tensors, bytes), its checksums verified.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "command.h"
#include "zoff/checkpoint/checkpoint_reader.h"

namespace zoff::cli {
namespace {

struct InspectArgs {
  std::string checkpoint;
  bool tensors = false;
  bool json = false;
};

// "[3, 4]": c10's own printing of a shape.
std::string shape_text(const std::vector<int64_t>& shape) {
  return c10::str(c10::IntArrayRef(shape));
}

uint64_t total_bytes(const checkpoint::CheckpointInfo& info) {
  uint64_t bytes = 0;
  for (const auto& f : info.files) bytes += f.bytes;
  return bytes;
}

void print_text(const checkpoint::CheckpointInfo& info, bool tensors) {
  std::printf("checkpoint %s: verified (every rank file's length and CRC32)\n", info.dir.c_str());
  std::printf("  step %lld (%lld applied), %s%s%s, seed %llu\n", static_cast<long long>(info.step),
              static_cast<long long>(info.applied_steps), info.model.c_str(),
              info.preset.empty() ? "" : (" " + info.preset).c_str(),
              info.context ? (", context " + std::to_string(info.context)).c_str() : "",
              static_cast<unsigned long long>(info.seed));
  std::printf("  written by %d rank(s) at ZeRO stage %d, train_batch_size %lld\n", info.world_size,
              info.zero_stage, static_cast<long long>(info.train_batch_size));
  std::string states;
  for (const auto& n : info.state_names) states += (states.empty() ? "" : ", ") + n;
  std::printf("  optimizer %s (%s), fp32 master and states\n", info.optimizer_type.c_str(),
              states.c_str());
  std::printf("  %zu parameters, %lld elements; %zu frozen parameters and buffers\n",
              info.slots.size(), static_cast<long long>(info.numel), info.replicated.size());
  for (const auto& f : info.files) {
    std::printf("  %s: %llu bytes, CRC32 %08x\n", f.name.c_str(),
                static_cast<unsigned long long>(f.bytes), f.crc32);
  }
  std::printf("  total %llu bytes\n", static_cast<unsigned long long>(total_bytes(info)));
  if (!tensors) return;
  for (const auto& s : info.slots) {
    std::printf("  param  %-40s %s F32\n", s.name.c_str(), shape_text(s.shape).c_str());
  }
  for (const auto& r : info.replicated) {
    std::printf("  %-6s %-40s %s %s\n", r.kind.c_str(), r.name.c_str(), shape_text(r.shape).c_str(),
                r.dtype.c_str());
  }
}

nlohmann::ordered_json as_json(const checkpoint::CheckpointInfo& info) {
  nlohmann::ordered_json j = {{"dir", info.dir},
                              {"verified", true},
                              {"step", info.step},
                              {"applied_steps", info.applied_steps},
                              {"model", info.model},
                              {"preset", info.preset},
                              {"context", info.context},
                              {"seed", info.seed},
                              {"world_size", info.world_size},
                              {"zero_stage", info.zero_stage},
                              {"train_batch_size", info.train_batch_size},
                              {"optimizer", info.optimizer_type},
                              {"state_names", info.state_names},
                              {"numel", info.numel},
                              {"bytes", total_bytes(info)}};
  for (const auto& s : info.slots) j["params"].push_back({{"name", s.name}, {"shape", s.shape}});
  for (const auto& r : info.replicated) {
    j["replicated"].push_back(
        {{"name", r.name}, {"kind", r.kind}, {"shape", r.shape}, {"dtype", r.dtype}});
  }
  for (const auto& f : info.files) {
    j["files"].push_back({{"name", f.name}, {"bytes", f.bytes}, {"crc32", f.crc32}});
  }
  return j;
}

void add_inspect(CLI::App& root, int& exit_code) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = root.add_subcommand(
      "inspect", "Print what a checkpoint holds and verify its checksums (any world size)");
  cmd->add_option("checkpoint", args->checkpoint,
                  "checkpoint directory, or a --save root (its `latest` is used)")
      ->required();
  cmd->add_flag("--tensors", args->tensors, "list every tensor with its shape and dtype");
  cmd->add_flag("--json", args->json, "print one JSON object (tensors included)");
  cmd->callback([args, &exit_code] {
    // The reader checks every rank file's length and CRC32 before anything is printed.
    const checkpoint::CheckpointReader reader(args->checkpoint);
    if (args->json) {
      std::printf("%s\n", as_json(reader.info()).dump().c_str());
    } else {
      print_text(reader.info(), args->tensors);
    }
    exit_code = 0;
  });
}

}  // namespace
}  // namespace zoff::cli

ZOFF_REGISTER_COMMAND(inspect, zoff::cli::add_inspect);
