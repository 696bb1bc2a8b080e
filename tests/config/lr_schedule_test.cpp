// Tests lr_at against values produced by DeepSpeed's own lr_schedules.py classes.
#include "zoff/config/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "zoff/core/error.h"

namespace zoff::config::lr_schedule_test {
namespace {

// The expected values below were produced by running DeepSpeed's own scheduler classes
// (deepspeed/runtime/lr_schedules.py at commit 38327e07f, with python3-torch 1.13) on a
// torch.optim.SGD optimizer, reading param_groups[0]['lr'] before each optimizer step and
// calling scheduler.step() after it, exactly as DeepSpeedEngine._take_model_step does.
// Only the relative rounding of libm differs, hence a tight relative tolerance.
constexpr double kRelTol = 1e-12;

void expect_lr(const SchedulerConfig& s, double base, int64_t step, double expected) {
  const double got = lr_at(s, base, step);
  EXPECT_NEAR(got, expected, kRelTol * std::max(1e-30, std::fabs(expected)) + 1e-18)
      << s.type << " " << s.warmup_type << " step " << step;
}

SchedulerConfig warmup(const std::string& type, const std::string& warmup_type) {
  SchedulerConfig s;
  s.type = type;
  s.warmup_type = warmup_type;
  return s;
}

TEST(LrSchedule, NoSchedulerIsBaseLr) {
  SchedulerConfig s;
  EXPECT_DOUBLE_EQ(lr_at(s, 0.25, 0), 0.25);
  EXPECT_DOUBLE_EQ(lr_at(s, 0.25, 1000), 0.25);
}

TEST(LrSchedule, WarmupLrLogMatchesDeepSpeed) {
  SchedulerConfig s = warmup("WarmupLR", "log");
  s.warmup_min_lr = 1e-4;
  s.warmup_max_lr = 1e-2;
  s.warmup_num_steps = 10;
  expect_lr(s, 0.1, 0, 0.0001);
  expect_lr(s, 0.1, 1, 0.0001);
  expect_lr(s, 0.1, 2, 0.0030801969570734135);
  expect_lr(s, 0.1, 5, 0.007019803042926586);
  expect_lr(s, 0.1, 9, 0.009547000843449316);
  expect_lr(s, 0.1, 10, 0.009999999999999998);
  expect_lr(s, 0.1, 11, 0.01);
  expect_lr(s, 0.1, 35, 0.01);
}

TEST(LrSchedule, WarmupLrLinearMatchesDeepSpeed) {
  SchedulerConfig s = warmup("WarmupLR", "linear");
  s.warmup_min_lr = 1e-4;
  s.warmup_max_lr = 1e-2;
  s.warmup_num_steps = 10;
  expect_lr(s, 0.1, 0, 0.0001);
  expect_lr(s, 0.1, 1, 0.0001);
  expect_lr(s, 0.1, 2, 0.0010900000000000003);
  expect_lr(s, 0.1, 5, 0.004060000000000001);
  expect_lr(s, 0.1, 9, 0.008020000000000001);
  expect_lr(s, 0.1, 10, 0.00901);
  expect_lr(s, 0.1, 11, 0.01);
  expect_lr(s, 0.1, 30, 0.01);
}

TEST(LrSchedule, WarmupDecayLrMatchesDeepSpeed) {
  SchedulerConfig s = warmup("WarmupDecayLR", "linear");
  s.warmup_min_lr = 0.0;
  s.warmup_max_lr = 3e-3;
  s.warmup_num_steps = 10;
  s.total_num_steps = 30;
  expect_lr(s, 0.1, 0, 0.0);
  expect_lr(s, 0.1, 1, 0.0);
  expect_lr(s, 0.1, 2, 0.00030000000000000003);
  expect_lr(s, 0.1, 10, 0.0027);
  expect_lr(s, 0.1, 11, 0.003);
  expect_lr(s, 0.1, 12, 0.00285);
  expect_lr(s, 0.1, 20, 0.0016500000000000002);
  expect_lr(s, 0.1, 29, 0.00030000000000000003);
  expect_lr(s, 0.1, 30, 0.00015000000000000001);
  expect_lr(s, 0.1, 31, 0.0);  // reaches 0 at total_num_steps and stays there
  expect_lr(s, 0.1, 35, 0.0);
}

TEST(LrSchedule, WarmupCosineLrLogMatchesDeepSpeed) {
  SchedulerConfig s = warmup("WarmupCosineLR", "log");
  s.warmup_min_ratio = 0.1;
  s.cos_min_ratio = 0.01;
  s.warmup_num_steps = 10;
  s.total_num_steps = 30;
  const double base = 0.02;
  expect_lr(s, base, 0, 0.0);  // DeepSpeed's constructor sets lr 0 before the first step()
  expect_lr(s, base, 1, 0.002);
  expect_lr(s, base, 2, 0.007418539921951662);
  expect_lr(s, base, 5, 0.014581460078048336);
  expect_lr(s, base, 9, 0.019176365169907846);
  expect_lr(s, base, 10, 0.019999999999999997);
  expect_lr(s, base, 11, 0.019878114571891866);
  expect_lr(s, base, 12, 0.019515459511322022);
  expect_lr(s, base, 20, 0.0101);
  expect_lr(s, base, 29, 0.00032188542810813716);
  expect_lr(s, base, 30, 0.0002);
  expect_lr(s, base, 31, 0.0003218854281081361);  // unclamped cosine rises again, as in DeepSpeed
  expect_lr(s, base, 35, 0.0030996428662531782);
}

TEST(LrSchedule, WarmupCosineLrLinearMatchesDeepSpeed) {
  SchedulerConfig s = warmup("WarmupCosineLR", "linear");
  s.warmup_min_ratio = 0.0;
  s.cos_min_ratio = 0.05;
  s.warmup_num_steps = 10;
  s.total_num_steps = 30;
  const double base = 0.02;
  expect_lr(s, base, 0, 0.0);
  expect_lr(s, base, 2, 0.002);
  expect_lr(s, base, 9, 0.016);
  expect_lr(s, base, 10, 0.018000000000000002);
  expect_lr(s, base, 11, 0.01988303923565381);
  expect_lr(s, base, 20, 0.0105);
  expect_lr(s, base, 30, 0.001);
}

// Across the end of warmup the lr moves by at most one warmup increment: no jump.
TEST(LrSchedule, ContinuousAtWarmupBoundary) {
  for (const char* type : {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"}) {
    for (const char* wt : {"log", "linear"}) {
      SchedulerConfig s = warmup(type, wt);
      s.warmup_min_lr = 1e-5;
      s.warmup_max_lr = 1e-3;
      s.warmup_num_steps = 100;
      s.total_num_steps = 1000;
      const double base = 1e-3;
      const double range = 1e-3;                       // max - min, in lr units, for both families
      const double step_bound = range / 100.0 * 1.01;  // one linear warmup increment
      for (int64_t k = 95; k <= 105; ++k) {
        const double jump = std::fabs(lr_at(s, base, k + 1) - lr_at(s, base, k));
        EXPECT_LE(jump, step_bound) << type << " " << wt << " at step " << k;
      }
      // The peak is reached right after warmup.
      EXPECT_NEAR(lr_at(s, base, 101), 1e-3, 1e-3 * 1e-3) << type << " " << wt;
    }
  }
}

TEST(LrSchedule, NegativeStepIsUsageError) {
  SchedulerConfig s = warmup("WarmupLR", "log");
  EXPECT_THROW(lr_at(s, 1e-3, -1), UsageError);
}

TEST(LrSchedule, CosineWithoutDecaySpanIsUsageError) {
  SchedulerConfig s = warmup("WarmupCosineLR", "log");
  s.warmup_num_steps = 10;
  s.total_num_steps = 10;
  try {
    lr_at(s, 1e-3, 20);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("total_num_steps"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zoff::config::lr_schedule_test
