// Entry point of the `zoff` command: parses the subcommand and turns errors into exit codes.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "command.h"
#include "zoff/core/error.h"

namespace zoff::cli {
std::vector<CommandEntry>& command_registry() {
  static std::vector<CommandEntry> registry;
  return registry;
}
}  // namespace zoff::cli

int main(int argc, char** argv) {
  CLI::App app{"zoff: ZeRO-Offload training on LibTorch"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "zoff 0.1.0");
  int exit_code = 0;
  auto& registry = zoff::cli::command_registry();
  std::sort(registry.begin(), registry.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (auto& entry : registry) entry.add(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "zoff: error: " << e.what() << "\n";
    return 2;
  } catch (const zoff::UsageError& e) {
    std::cerr << "zoff: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "zoff: error: " << e.what() << "\n";
    return 1;
  }
  std::fflush(stdout);
  return exit_code;
}
