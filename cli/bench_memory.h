// `zoff bench memory`, added under `zoff bench` by cmd_bench.cpp.
#pragma once

#include <CLI/CLI.hpp>

namespace zoff::cli {

void add_bench_memory(CLI::App& bench, int& exit_code);

}  // namespace zoff::cli
