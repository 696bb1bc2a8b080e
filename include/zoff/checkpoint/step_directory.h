// How a checkpoint step directory is staged and swapped into place, so that a save that
// fails or is killed never damages the checkpoint `latest` names.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace zoff::checkpoint {

// "step_<N>": a committed checkpoint directory under the root.
std::string step_dir_name(int64_t step);
// "step_<N>.tmp": where a save of step N writes before it is swapped in.
std::string staging_dir_name(int64_t step);

// Removes what killed saves leave in `root`: step_<N>.tmp and step_<N>.old.tmp directories
// and latest.tmp. Nothing else is touched (the root may hold a user's files). Returns how
// many entries were removed.
int remove_save_leftovers(const std::string& root);

// Makes the complete directory `staged` (root/step_<N>.tmp) the checkpoint `dir`
// (root/step_<N>) in one rename. When `dir` already exists the two are exchanged atomically
// (renameat2 RENAME_EXCHANGE), so a reader sees the old or the new step, never neither; the
// old one is then removed. File systems without the exchange move the old one aside first
// (a window of two renames in which `dir` is missing; said in the error if one fails).
void swap_in_step(const std::string& staged, const std::string& dir, const std::string& root);

// A fault-injection seam for tests: called with (rank, file path) just before a save commits
// each file it writes (a rank file, meta.json, `latest`); throwing from it fails the save
// there. An empty function removes it. Process-wide.
using SaveFaultHook = std::function<void(int rank, const std::string& path)>;
void set_save_fault_hook(SaveFaultHook hook);
void run_save_fault_hook(int rank, const std::string& path);

}  // namespace zoff::checkpoint
