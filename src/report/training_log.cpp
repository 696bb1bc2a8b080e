// Reads the JSONL training log written once per optimizer step.
#include "zoff/report/training_log.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "zoff/core/error.h"

namespace zoff::report {
namespace {

using nlohmann::json;
constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

[[noreturn]] void fail_line(const std::string& source, size_t line, const std::string& why) {
  throw UsageError("report: " + source + ":" + std::to_string(line) + ": " + why);
}

// A numeric field: absent or null -> NaN; any other non-number is an error.
double number_or_nan(const json& obj, const char* key, const std::string& source, size_t line) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return kMissing;
  if (!it->is_number()) {
    fail_line(source, line, std::string("\"") + key + "\" = " + it->dump() + ": must be a number");
  }
  return it->get<double>();
}

int64_t step_of(const json& obj, const std::string& source, size_t line) {
  auto it = obj.find("step");
  if (it == obj.end()) fail_line(source, line, "missing \"step\"");
  if (!it->is_number_integer()) {
    fail_line(source, line, "\"step\" = " + it->dump() + ": must be an integer");
  }
  return it->get<int64_t>();
}

void flatten_mem(const json& v, const std::string& prefix, std::map<std::string, double>& out,
                 const std::string& source, size_t line) {
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_number()) {
      out[path] = it->get<double>();
    } else if (it->is_object()) {
      flatten_mem(*it, path, out, source, line);
    } else if (!it->is_null()) {
      fail_line(source, line, "\"mem." + path + "\" = " + it->dump() + ": must be a number");
    }
  }
}

// {"params": B} -> "device/params"; {"offload": {"optim": B}} -> "offload/optim".
// When per-tier objects are present, the flat keys are their summary (zoff's own logs
// write both) and are left out, as are "total" entries, so nothing is counted twice.
std::map<std::string, double> read_mem(const json& mem, const std::string& source, size_t line) {
  if (!mem.is_object()) {
    fail_line(source, line, "\"mem\" = " + mem.dump() + ": must be an object of byte counts");
  }
  bool has_tiers = false;
  for (auto it = mem.begin(); it != mem.end(); ++it) has_tiers = has_tiers || it->is_object();
  std::map<std::string, double> out;
  for (auto it = mem.begin(); it != mem.end(); ++it) {
    if (it->is_number()) {
      if (!has_tiers) out["device/" + it.key()] = it->get<double>();
    } else if (it->is_object()) {
      std::map<std::string, double> tier;
      flatten_mem(*it, "", tier, source, line);
      for (const auto& [k, bytes] : tier) {
        if (k != "total") out[it.key() + "/" + k] = bytes;
      }
    } else if (!it->is_null()) {
      fail_line(source, line, "\"mem." + it.key() + "\" = " + it->dump() + ": must be a number");
    }
  }
  return out;
}

std::string run_name(const std::string& source) {
  std::string name = source.substr(source.find_last_of('/') + 1);
  for (const char* ext : {".jsonl", ".json", ".log"}) {
    const std::string e = ext;
    if (name.size() > e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0) {
      name.resize(name.size() - e.size());
      break;
    }
  }
  return name.empty() ? source : name;
}

}  // namespace

RunLog parse_training_log(const std::string& text, const std::string& source) {
  RunLog run;
  run.path = source;
  run.name = run_name(source);
  std::istringstream in(text);
  std::string raw;
  size_t line = 0;
  while (std::getline(in, raw)) {
    ++line;
    if (raw.find_first_not_of(" \t\r") == std::string::npos) continue;
    json obj;
    try {
      obj = json::parse(raw);
    } catch (const json::parse_error& e) {
      if (in.eof()) {  // getline hit the end without '\n': the writer was killed mid-line
        run.cut_last_line = true;
        break;
      }
      std::string what = e.what();
      const size_t colon = what.find(": ");
      fail_line(source, line,
                "malformed JSON: " + (colon == std::string::npos ? what : what.substr(colon + 2)));
    }
    if (!obj.is_object()) fail_line(source, line, "expected a JSON object, got " + obj.dump());
    if (auto ev = obj.find("event"); ev != obj.end()) {
      if (!ev->is_string())
        fail_line(source, line, "\"event\" = " + ev->dump() + ": must be a string");
      LogEvent event;
      event.event = ev->get<std::string>();
      event.step = step_of(obj, source, line);
      for (auto it = obj.begin(); it != obj.end(); ++it) {
        if (it.key() != "step" && it->is_number()) event.values[it.key()] = it->get<double>();
      }
      run.events.push_back(std::move(event));
      continue;
    }
    LogStep s;
    s.step = step_of(obj, source, line);
    if (!obj.contains("loss")) fail_line(source, line, "missing \"loss\"");
    s.loss = number_or_nan(obj, "loss", source, line);
    s.lr = number_or_nan(obj, "lr", source, line);
    s.grad_norm = number_or_nan(obj, "grad_norm", source, line);
    s.samples_per_s = number_or_nan(obj, "samples_per_s", source, line);
    s.tokens_per_s = number_or_nan(obj, "tokens_per_s", source, line);
    if (auto mem = obj.find("mem"); mem != obj.end() && !mem->is_null()) {
      s.mem_bytes = read_mem(*mem, source, line);
    }
    run.steps.push_back(std::move(s));
  }
  if (run.steps.empty()) {
    throw UsageError("report: " + source + ": no step lines (an empty or event-only log)");
  }
  return run;
}

RunLog read_training_log(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw UsageError("report: log '" + path + "' is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("report: cannot open log '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw UsageError("report: cannot read log '" + path + "'");
  return parse_training_log(text.str(), path);
}

}  // namespace zoff::report
