// LossScaler: static and dynamic (hysteresis, growth window, minimum) loss scaling.
#include "zoff/engine/loss_scaler.h"

#include <cmath>
#include <sstream>

#include "zoff/core/error.h"

namespace zoff::engine {
namespace {
constexpr size_t kHistoryLength = 8;
constexpr double kScaleFactor = 2.0;
}  // namespace

LossScaler::LossScaler(const config::Fp16Config& c)
    : dynamic_(c.loss_scale == 0.0),
      scale_(c.loss_scale == 0.0 ? std::ldexp(1.0, c.initial_scale_power) : c.loss_scale),
      min_scale_(c.min_loss_scale),
      window_(c.loss_scale_window),
      hysteresis_(c.hysteresis),
      hysteresis_left_(c.hysteresis) {
  ZOFF_CHECK_ARG(scale_ > 0.0 && std::isfinite(scale_), "fp16.loss_scale = ", scale_,
                 ": must be a positive finite number");
  ZOFF_CHECK_ARG(hysteresis_ >= 1, "fp16.hysteresis = ", hysteresis_, ": must be >= 1");
  ZOFF_CHECK_ARG(window_ >= 1, "fp16.loss_scale_window = ", window_, ": must be >= 1");
}

void LossScaler::update(bool overflow, int64_t step) {
  if (!dynamic_) return;
  std::ostringstream note;
  if (overflow) {
    clean_steps_ = 0;
    if (hysteresis_left_ > 1) {
      --hysteresis_left_;
      note << "step " << step << ": overflow, scale kept at " << scale_ << " (hysteresis "
           << hysteresis_left_ << " left)";
    } else {
      if (scale_ <= min_scale_) {
        history_.push_back(
            detail::concat("step ", step, ": overflow at the minimum scale ", scale_));
        throw Error(detail::concat(
            "fp16: gradient overflow at step ", step,
            " with the loss scale already at "
            "fp16.min_loss_scale = ",
            min_scale_,
            "; the model produces inf/nan gradients at any scale (try bf16, a lower lr, or "
            "gradient_clipping). Recent scale history: ",
            history()));
      }
      const double next = std::max(scale_ / kScaleFactor, min_scale_);
      note << "step " << step << ": overflow, scale " << scale_ << " -> " << next;
      scale_ = next;
    }
  } else {
    ++clean_steps_;
    if (clean_steps_ % window_ == 0) {
      hysteresis_left_ = hysteresis_;
      note << "step " << step << ": " << window_ << " clean steps, scale " << scale_ << " -> "
           << scale_ * kScaleFactor;
      scale_ *= kScaleFactor;
    }
  }
  if (!note.str().empty()) {
    history_.push_back(note.str());
    while (history_.size() > kHistoryLength) history_.pop_front();
  }
}

void LossScaler::set_state(const State& s) {
  ZOFF_CHECK_ARG(s.scale > 0.0 && std::isfinite(s.scale), "loss scaler state: scale ", s.scale,
                 " must be positive and finite");
  scale_ = s.scale;
  hysteresis_left_ = s.hysteresis_left;
  clean_steps_ = s.clean_steps;
}

std::string LossScaler::history() const {
  std::string out;
  for (const auto& h : history_) out += (out.empty() ? "" : "; ") + h;
  return out.empty() ? "(no changes)" : out;
}

}  // namespace zoff::engine
