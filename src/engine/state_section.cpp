// StateSection dtypes: the rank-file names of stored master and optimizer-state elements.
#include "zoff/core/error.h"
#include "zoff/engine/master_store.h"

namespace zoff::engine {

size_t section_element_bytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16") return 2;
  if (is_int8_code_dtype(dtype)) return 1;
  throw UsageError("state section dtype '" + dtype + "': must be F32, BF16, I8 or U8");
}

bool is_int8_code_dtype(const std::string& dtype) { return dtype == "I8" || dtype == "U8"; }

std::string section_dtype(optim::StateDtype dtype, const std::string& name) {
  switch (dtype) {
    case optim::StateDtype::kFp32:
      return "F32";
    case optim::StateDtype::kBf16:
      return "BF16";
    case optim::StateDtype::kInt8:
      return name == "exp_avg" ? "I8" : "U8";
  }
  return "?";
}

}  // namespace zoff::engine
