// The first line of an exception's message, for one-line errors: c10 errors append a C++
// backtrace after the first line, which a user's error message must not carry.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace zoff::dist {

inline std::string first_line(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  const std::string text = c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
  return text.substr(0, text.find('\n'));
}

}  // namespace zoff::dist
