// A synthetic but realistic training log (JSONL) for the report tests.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace zoff::report::testing {

// `steps` optimizer steps with a decaying loss (scaled by loss_scale; throughput divided by it), a
// warmup lr, throughput, two-tier memory, and an eval event every 50 steps.
inline std::string make_training_log(int steps, double loss_scale = 1.0) {
  std::string out;
  char line[512];
  for (int s = 1; s <= steps; ++s) {
    const double loss = loss_scale * (0.5 + 2.5 * std::exp(-s / 60.0)) + 0.02 * std::sin(s * 0.7);
    const double lr = 3e-4 * std::min(1.0, s / 40.0);
    std::snprintf(
        line, sizeof(line),
        "{\"step\": %d, \"loss\": %.6f, \"lr\": %.8g, \"grad_norm\": %.4f, "
        "\"samples_per_s\": %.2f, \"tokens_per_s\": %.1f, \"mem\": {\"compute\": "
        "{\"params\": 250000000, \"grads\": %d}, \"offload\": {\"grads\": 500000000, "
        "\"optim\": 1500000000}}}\n",
        s, loss, lr, 1.0 + 0.5 * std::cos(s * 0.1), (480.0 + 20 * std::sin(s * 0.3)) / loss_scale,
        (480.0 + 20 * std::sin(s * 0.3)) * 256 / loss_scale, 100000000 + (s % 7) * 1000000);
    out += line;
    if (s % 50 == 0) {
      std::snprintf(line, sizeof(line),
                    "{\"event\": \"eval\", \"step\": %d, \"val_loss\": %.5f, \"accuracy\": %.4f}\n",
                    s, loss + 0.1, 0.3 + 0.5 * s / steps);
      out += line;
    }
  }
  return out;
}

}  // namespace zoff::report::testing
