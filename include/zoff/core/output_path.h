// Checks that a path a user gave for zoff to write (a model file, an export, a report) names
// something zoff may replace: a regular file or nothing, in an existing directory.
#pragma once

#include <string>

namespace zoff {

// Throws zoff::UsageError naming `flag` and `path` when `path` is empty, when something that
// is not a regular file is there (a directory, a symbolic link, a device node, a FIFO, a
// socket: zoff's atomic rename would replace it), or when its directory does not exist or
// is not writable. Called before any work is done and again just before the rename.
void check_output_path(const std::string& flag, const std::string& path);

// The first half of check_output_path: only "something that is not a regular file is there"
// (for writers that rename into place; `what` starts the message, e.g. the flag).
void check_replaceable(const std::string& what, const std::string& path);

}  // namespace zoff
