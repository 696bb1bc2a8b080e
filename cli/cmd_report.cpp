// `zoff report`: training logs (JSONL) -> one self-contained HTML page with charts.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "zoff/report/html_report.h"

namespace zoff::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> logs;
  std::string out;
};

void add_report(CLI::App& root, int& exit_code) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* cmd = root.add_subcommand(
      "report", "Write an HTML report (loss, lr, throughput, memory) of training logs");
  cmd->add_option("logs", args->logs, "Training logs, one JSON object per line (RUN.jsonl ...)")
      ->required();
  cmd->add_option("--out", args->out, "HTML file to write (written atomically)")->required();
  cmd->callback([args, &exit_code] {
    for (const auto& w : report::write_html_report(args->logs, args->out)) {
      std::cerr << "zoff: warning: " << w << "\n";
    }
    std::cout << "report: wrote " << args->out << " (" << args->logs.size()
              << (args->logs.size() == 1 ? " run)" : " runs)") << "\n";
    exit_code = 0;
  });
}

}  // namespace
}  // namespace zoff::cli

ZOFF_REGISTER_COMMAND(report, zoff::cli::add_report);
