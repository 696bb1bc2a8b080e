// Process-wide settings every test binary needs before its first test: linked into each.
#include <cstdlib>

namespace zoff::test_process_env {
namespace {

// PyTorch 2.11's c10d flight recorder (a process-wide singleton every ProcessGroupGloo
// records into) is not safe when two Gloo groups of one process issue collectives at once:
// tests that run ranks as threads crashed in FlightRecorder::recordWithResetEnabled on it
// (2 of 8 runs of DevicePath.*; fixed in later PyTorch, pytorch/pytorch#179313). A buffer
// of size 0 turns the recorder off; an explicit setting in the environment wins.
[[maybe_unused]] const bool kFlightRecorderOff = [] {
  setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);
  return true;
}();

}  // namespace
}  // namespace zoff::test_process_env
