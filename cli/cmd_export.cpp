// `zoff export`: a checkpoint's parameters -> one .safetensors file, streamed tensor by tensor.
#include <cstdio>
#include <memory>
#include <string>

#include "command.h"
#include "zoff/checkpoint/safetensors_export.h"

namespace zoff::cli {
namespace {

struct ExportArgs {
  std::string checkpoint;
  std::string out;
};

void add_export(CLI::App& root, int& exit_code) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd = root.add_subcommand(
      "export", "Write a checkpoint's parameters to a .safetensors file (any world size)");
  cmd->add_option("checkpoint", args->checkpoint,
                  "checkpoint directory, or a --save root (its `latest` is used)")
      ->required();
  cmd->add_option("--out", args->out, "safetensors file to write (written atomically)")->required();
  cmd->callback([args, &exit_code] {
    const auto s = checkpoint::export_safetensors(args->checkpoint, args->out);
    std::printf("export: %s -> %s (%lld tensors, %lld parameters, %llu bytes)\n",
                s.checkpoint_dir.c_str(), args->out.c_str(), static_cast<long long>(s.tensors),
                static_cast<long long>(s.elements), static_cast<unsigned long long>(s.file_bytes));
    exit_code = 0;
  });
}

}  // namespace
}  // namespace zoff::cli

ZOFF_REGISTER_COMMAND(export, zoff::cli::add_export);
