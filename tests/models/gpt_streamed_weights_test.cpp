// Streamed weights (a model whose units are read as forward reaches them) with and without
// read-ahead: the same logits as the model held whole, the next unit read while this one
// computes, a changed unit order and a failed read.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <utility>

#include "zoff/core/error.h"
#include "zoff/models/gpt.h"
#include "zoff/models/gpt_kv_cache.h"
#include "zoff/unit/streamed_weights.h"
#include "zoff/unit/unit_call.h"

namespace zoff::models::gpt_streamed_weights_test {
namespace {

GptConfig small_config() {
  GptConfig c;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 16;
  return c;
}

// Every parameter's values by name, as a model file would hold them.
std::map<std::string, torch::Tensor> values_of(Gpt& model) {
  std::map<std::string, torch::Tensor> values;
  for (const auto& item : model->named_parameters()) values[item.key()] = item.value().clone();
  return values;
}

// A ParamInit reading from `values`, counting the reads made off the calling thread.
struct MapReader {
  explicit MapReader(std::map<std::string, torch::Tensor> v) : values(std::move(v)) {}
  std::map<std::string, torch::Tensor> values;
  std::thread::id compute_thread = std::this_thread::get_id();
  std::atomic<int> reads_elsewhere{0};
  std::string fail_on;  // a read of this name throws (as an I/O error would)
  std::atomic<bool> failed_elsewhere{false};

  unit::ParamInit init() {
    return [this](const std::string& name, torch::Tensor out) {
      if (std::this_thread::get_id() != compute_thread) ++reads_elsewhere;
      if (name == fail_on) {
        failed_elsewhere = std::this_thread::get_id() != compute_thread;
        throw Error("cannot read " + name + ": Input/output error");
      }
      torch::NoGradGuard no_grad;
      out.copy_(values.at(name));
    };
  }
};

// A model held whole (seeded) and the same model built without values, with a reader of the
// whole one's values for it.
struct WholeAndDeferred {
  static Gpt seeded(uint64_t seed) {
    torch::manual_seed(seed);
    Gpt model(small_config());
    model->eval();
    return model;
  }
  explicit WholeAndDeferred(uint64_t seed)
      : whole(seeded(seed)), reader(values_of(whole)), model(small_config(), GptInit::kDeferred) {
    model->eval();
  }
  Gpt whole;
  MapReader reader;
  Gpt model;
};

// Logits of the prompt and then of `extra` single positions through the KV cache.
std::vector<torch::Tensor> cached_logits(Gpt& model, int64_t extra) {
  torch::NoGradGuard no_grad;
  GptKvCache cache(model->config(), 1, torch::TensorOptions().dtype(torch::kFloat32));
  std::vector<torch::Tensor> out;
  out.push_back(model->forward_cached(torch::tensor({{3, 1, 4, 1}}, torch::kInt64), cache));
  for (int64_t i = 0; i < extra; ++i) {
    out.push_back(model->forward_cached(torch::tensor({{5 + i}}, torch::kInt64), cache));
  }
  return out;
}

int64_t block_bytes(Gpt& model) {
  int64_t bytes = 0;
  for (const auto& p : model->blocks[0]->parameters()) bytes += static_cast<int64_t>(p.nbytes());
  return bytes;
}

class StreamedGpt : public ::testing::TestWithParam<bool> {};

TEST_P(StreamedGpt, GivesTheLogitsOfTheModelHeldWhole) {
  const bool read_ahead = GetParam();
  WholeAndDeferred m(3);
  Gpt& whole = m.whole;
  MapReader& reader = m.reader;
  Gpt& streamed_model = m.model;
  const auto expected = cached_logits(whole, 5);
  std::vector<torch::Tensor> got;
  int64_t peak = 0, hits = 0, misses = 0;
  {
    unit::StreamedWeights streamed(*streamed_model, reader.init(), read_ahead);
    got = cached_logits(streamed_model, 5);
    peak = streamed.peak_bytes();
    hits = streamed.read_ahead_hits();
    misses = streamed.read_ahead_misses();
  }
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i], expected[i])) << i;
  const int64_t block = block_bytes(whole);
  if (read_ahead) {
    // Six forwards: from the second on, every block and the final norm come from the reader.
    EXPECT_GE(hits, 5 * (3 * 12 + 2)) << "parameters valued from a read-ahead";
    EXPECT_EQ(misses, 0);
    EXPECT_GT(reader.reads_elsewhere.load(), 0);
    EXPECT_GT(peak, block) << "the next block is read while this one computes";
  } else {
    EXPECT_EQ(hits, 0);
    EXPECT_EQ(reader.reads_elsewhere.load(), 0);
  }
  // This unit, the next one read ahead, and at most one unit's spare buffers.
  EXPECT_LE(peak, (read_ahead ? 3 : 2) * block);
}

INSTANTIATE_TEST_SUITE_P(ReadAhead, StreamedGpt, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "On" : "Off"; });

TEST(StreamedWeights, AChangedUnitOrderDropsTheReadAheadAndReadsWhatIsEntered) {
  WholeAndDeferred m(4);
  Gpt& whole = m.whole;
  Gpt& model = m.model;
  unit::StreamedWeights streamed(*model, m.reader.init(), /*read_ahead=*/true);
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({1, 2, 32});
  auto run = [&](std::initializer_list<size_t> order) {
    auto y = x;
    for (size_t l : order) {
      y = with_unit(*model->blocks[l],
                    [&] { return model->blocks[l]->as<GptBlockImpl>()->forward(y); });
    }
    return y;
  };
  auto run_whole = [&](std::initializer_list<size_t> order) {
    auto y = x;
    for (size_t l : order) y = whole->blocks[l]->as<GptBlockImpl>()->forward(y);
    return y;
  };
  run({0, 1, 2});
  run({0, 1, 2});                                             // learns 0 -> 1 -> 2
  EXPECT_TRUE(torch::equal(run({0, 2}), run_whole({0, 2})));  // 1 was read ahead, 2 entered
  EXPECT_GT(streamed.read_ahead_misses(), 0);
}

TEST(StreamedWeights, AFailedReadAheadFailsTheUnitThatNeedsIt) {
  WholeAndDeferred m(5);
  MapReader& reader = m.reader;
  Gpt& model = m.model;
  unit::StreamedWeights streamed(*model, reader.init(), /*read_ahead=*/true);
  cached_logits(model, 0);  // learns the order
  reader.fail_on = "blocks.2.fc.weight";
  try {
    cached_logits(model, 0);
    FAIL() << "a read that failed on the reader thread was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read blocks.2.fc.weight"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(reader.failed_elsewhere) << "the failed read was not a read-ahead";
  reader.fail_on.clear();  // the disk is back: the next forward reads everything again
  EXPECT_NO_THROW(cached_logits(model, 0));
}

}  // namespace
}  // namespace zoff::models::gpt_streamed_weights_test
