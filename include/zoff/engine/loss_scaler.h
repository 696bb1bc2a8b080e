// fp16 loss scaling: a static scale, or DeepSpeed's dynamic scale with hysteresis.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "zoff/config/config.h"

namespace zoff::engine {

// The loss is multiplied by scale() before backward so small fp16 gradients do not flush
// to zero; gradients are divided by it before the update. Dynamic mode (loss_scale = 0):
// - an overflow (inf/nan in any rank's gradient) skips the step; the scale halves, unless
//   hysteresis still has credit (each overflow spends one; a halving needs it at 1);
// - after loss_scale_window consecutive clean steps the scale doubles (and hysteresis is
//   refilled);
// - an overflow when the scale is already at min_loss_scale stops the run: a zoff::Error
//   naming the step and the recent scale history, never a silent loop of skipped steps.
class LossScaler {
 public:
  explicit LossScaler(const config::Fp16Config& config);
  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  // Records the outcome of optimizer step `step` (1-based, counting skipped ones).
  void update(bool overflow, int64_t step);
  // What a checkpoint keeps so a resumed fp16 run scales exactly as the original.
  struct State {
    double scale = 0.0;
    int hysteresis_left = 0;
    int64_t clean_steps = 0;
  };
  State state() const { return {scale_, hysteresis_left_, clean_steps_}; }
  void set_state(const State& s);
  // "step 12: 65536 -> 32768 (overflow); ..." for the last few changes.
  std::string history() const;

 private:
  bool dynamic_;
  double scale_;
  double min_scale_;
  int64_t window_;
  int hysteresis_;
  int hysteresis_left_;
  int64_t clean_steps_ = 0;
  std::deque<std::string> history_;
};

}  // namespace zoff::engine
