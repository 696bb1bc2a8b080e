// One self-contained HTML page (inline SVG, no scripts, no network) summarizing training runs.
#pragma once

#include <string>
#include <vector>

#include "zoff/report/training_log.h"

namespace zoff::report {

// The page: a summary table (run, steps, final loss, mean throughput, peak memory) and charts
// with these <svg> ids: chart-loss (train loss; eval val_loss dashed), chart-lr,
// chart-throughput (samples/s), chart-tokens (tokens/s, when logged), chart-grad-norm (when
// logged), chart-memory (peak bytes per run and tier, stacked by category), chart-memory-steps
// (total bytes per tier over steps), and chart-eval-<metric> per other numeric eval field
// (e.g. chart-eval-accuracy). `runs` must not be empty.
std::string render_html_report(const std::vector<RunLog>& runs);

// Reads every log, renders the page and writes it to `out_path` atomically (temporary file
// in the same directory, fsync, rename). Bad logs are UsageErrors naming file and line, as is
// an output directory that is missing or not writable; other write failures are zoff::Errors
// naming the path. `out_path` must be a regular file or nothing (a directory, symlink or
// device there is a UsageError, checked before the logs are read). Returns warnings for the
// user (a log whose last line was cut by a kill), one line each.
std::vector<std::string> write_html_report(const std::vector<std::string>& log_paths,
                                           const std::string& out_path);

}  // namespace zoff::report
