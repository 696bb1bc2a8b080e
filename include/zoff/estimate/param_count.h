// Where `zoff estimate` gets its parameter count: a literal like 1.3B, or a model preset.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace zoff::estimate {

// Parses "7500000000", "7.5e9", "1.3B", "350M", "125k", "2T" (suffixes K, M, B or G, T;
// case-insensitive; decimal multiples) into a count rounded to the nearest integer.
// Anything else, or a count < 1, is a UsageError naming the text.
int64_t parse_param_count(const std::string& text);

// Exact parameter count of a named model preset, e.g. ("gpt", "gpt2-small"), supplied by the
// CLI from the models area (estimate does not depend on models). Throws UsageError for an
// unknown model or preset.
using PresetParamCount =
    std::function<int64_t(const std::string& model, const std::string& preset)>;

}  // namespace zoff::estimate
