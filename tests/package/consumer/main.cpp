// A user's program built against an installed zoff: trains a small model with the ZeRO engine.
#include <zoff/zoff.h>

#include <cstdio>
#include <memory>

int main() {
  torch::manual_seed(0);
  auto model = std::make_shared<torch::nn::LinearImpl>(4, 1);
  auto cfg = zoff::config::parse_config(
      R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8,
          "zero_optimization": {"stage": 2},
          "optimizer": {"type": "AdamW", "params": {"lr": 0.05}}})",
      1);
  auto comm = std::make_shared<zoff::dist::SingleComm>();
  zoff::engine::ZeroEngine engine(model, cfg, comm);
  const auto x = torch::randn({8, 4});
  const auto y = x.sum(1, true);
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    auto loss = torch::mse_loss(model->forward(x), y);
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    engine.backward(loss);
    engine.step();
  }
  std::printf("consumer: loss %.4f -> %.4f (zoff at %s)\n", first, last, ZOFF_CONSUMER_EXE);
  return last < first ? 0 : 1;
}
