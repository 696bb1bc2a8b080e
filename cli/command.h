// How each `zoff <command>` plugs into the command line: one file per command registers itself.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace zoff::cli {

// Adds the subcommand to `root`. The subcommand's callback runs the command and stores
// its exit code in `exit_code`. Errors are thrown (zoff::UsageError -> exit 2,
// zoff::Error -> exit 1) and printed on one line by main().
using AddCommand = std::function<void(CLI::App& root, int& exit_code)>;

struct CommandEntry {
  std::string name;
  AddCommand add;
};

std::vector<CommandEntry>& command_registry();

struct CommandRegistration {
  CommandRegistration(std::string name, AddCommand add) {
    command_registry().push_back({std::move(name), std::move(add)});
  }
};

}  // namespace zoff::cli

// In a cli/cmd_<name>.cpp: ZOFF_REGISTER_COMMAND(name, add_function);
#define ZOFF_REGISTER_COMMAND(name, fn) \
  static const ::zoff::cli::CommandRegistration zoff_command_##name(#name, fn)
