// Parses parameter counts written the way people say them: 7.5e9, 1.3B, 350M.
#include "zoff/estimate/param_count.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "zoff/core/error.h"

namespace zoff::estimate {

int64_t parse_param_count(const std::string& text) {
  const std::string bad = "params = \"" + text + "\": expected a count like 7.5e9, 1.3B or 350M";
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) {
    throw UsageError(bad);
  }
  std::string number = text;
  double scale = 1.0;
  const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  if (last == 'K' || last == 'M' || last == 'B' || last == 'G' || last == 'T') {
    number.pop_back();
    scale = last == 'K' ? 1e3 : last == 'M' ? 1e6 : last == 'T' ? 1e12 : 1e9;
  }
  if (number.empty()) throw UsageError(bad);
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value)) throw UsageError(bad);
  const double count = std::round(value * scale);
  if (!(count >= 1.0)) throw UsageError("params = \"" + text + "\": must be >= 1");
  // 1.3B is 1300000000 (up to rounding of the decimal), 1.5 is not a count of parameters.
  if (std::fabs(value * scale - count) > 1e-9 * count) {
    throw UsageError("params = \"" + text + "\": not a whole number of parameters");
  }
  if (count > 9.0e18) throw UsageError("params = \"" + text + "\": too large");
  return static_cast<int64_t>(count);
}

}  // namespace zoff::estimate
