// export_safetensors: a world-3 checkpoint exported to one file, read back by a minimal
// reader here and independently by Python's torch (json + struct + torch.frombuffer).
#include "zoff/checkpoint/safetensors_export.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint/checkpoint_test_support.h"
#include "zoff/checkpoint/atomic_file.h"
#include "zoff/core/error.h"
#include "zoff_test_paths.h"

namespace zoff::checkpoint::safetensors_export_test {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;
using testing::Segment;

// Python sums in float64 with its own order; the values are identical, the sums may differ
// in the last bits.
constexpr double kSumRelTol = 1e-12;

// Trains 3 steps at world 3 (stage 2), saves, and returns the run (rank 0's module).
testing::Run trained_world3(const ScratchDir& dir) {
  return testing::train_segment(testing::resume_config(2, 3), 3, Segment{0, 3, "", dir.path(), 3});
}

struct SafetensorsFile {
  nlohmann::json header;
  std::string data;  // everything after the header
};

SafetensorsFile read_safetensors(const std::string& path) {
  const std::string bytes = read_text_file(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  SafetensorsFile f;
  f.header = nlohmann::json::parse(bytes.substr(8, n));
  f.data = bytes.substr(8 + n);
  EXPECT_EQ(n % 8, 0u) << "header not padded to 8 bytes";
  EXPECT_EQ(bytes[8 + n - 1] == ' ' || bytes[8 + n - 1] == '}', true);
  return f;
}

TEST(SafetensorsExport, EveryTensorEqualsTheTrainedModule) {
  ScratchDir dir;
  const auto run = trained_world3(dir);
  const std::string out = dir / "model.safetensors";
  const auto summary = export_safetensors(dir.path(), out);
  EXPECT_EQ(summary.checkpoint_dir, dir / "step_3");
  EXPECT_EQ(summary.tensors, 6);
  EXPECT_EQ(summary.file_bytes, fs::file_size(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));

  const auto f = read_safetensors(out);
  EXPECT_EQ(f.header.at("__metadata__").at("step"), "3");
  EXPECT_EQ(f.header.at("__metadata__").at("model"), "tiny-mlp");
  uint64_t expected_begin = 0;  // module order, back to back
  size_t count = 0;
  for (const auto& item : run.modules[0]->named_parameters()) {
    const auto& e = f.header.at(item.key());
    EXPECT_EQ(e.at("dtype"), "F32");
    EXPECT_EQ(e.at("shape").get<std::vector<int64_t>>(), item.value().sizes().vec());
    const auto offs = e.at("data_offsets").get<std::vector<uint64_t>>();
    EXPECT_EQ(offs[0], expected_begin) << item.key();
    ASSERT_EQ(offs[1] - offs[0], static_cast<uint64_t>(item.value().numel()) * 4);
    expected_begin = offs[1];
    auto t = torch::empty(item.value().sizes(), torch::kFloat32);
    std::memcpy(t.data_ptr<float>(), f.data.data() + offs[0], offs[1] - offs[0]);
    EXPECT_TRUE(torch::equal(t, item.value())) << item.key();
    ++count;
  }
  EXPECT_EQ(expected_begin, f.data.size());
  EXPECT_EQ(count + 1, f.header.size());  // + __metadata__
}

bool python_has_torch() {
  return std::system((std::string(ZOFF_PYTHON) + " -c 'import torch' >/dev/null 2>&1").c_str()) ==
         0;
}

// Reads the file the way the safetensors spec describes it, with nothing of ours, and
// prints "name shape... | sum crc32" per tensor.
constexpr const char* kPythonReader = R"PY(
import json, struct, sys, zlib
import torch
raw = open(sys.argv[1], 'rb').read()
(n,) = struct.unpack('<Q', raw[:8])
assert n % 8 == 0, 'header length %d not a multiple of 8' % n
header = json.loads(raw[8:8 + n].decode('utf-8'))
header.pop('__metadata__')
body = raw[8 + n:]
spans = sorted((v['data_offsets'][0], v['data_offsets'][1], k) for k, v in header.items())
pos = 0
for begin, end, name in spans:
    assert begin == pos, 'gap or overlap before ' + name
    pos = end
assert pos == len(body), 'data section has %d trailing bytes' % (len(body) - pos)
for name, v in header.items():
    begin, end = v['data_offsets']
    assert v['dtype'] == 'F32'
    t = torch.frombuffer(bytearray(body[begin:end]), dtype=torch.float32).reshape(v['shape'])
    print(name, *t.shape, '|', repr(t.double().sum().item()), zlib.crc32(body[begin:end]))
)PY";

TEST(SafetensorsExport, PythonTorchReadsTheSameValues) {
  if (!python_has_torch()) GTEST_SKIP() << ZOFF_PYTHON << " has no torch (ZOFF_PYTHON_EXECUTABLE)";
  ScratchDir dir;
  const auto run = trained_world3(dir);
  const std::string out = dir / "model.safetensors";
  export_safetensors(dir / "step_3", out);
  write_file_atomically(dir / "reader.py", kPythonReader);
  const std::string listing = dir / "listing.txt";
  const std::string cmd =
      std::string(ZOFF_PYTHON) + " " + (dir / "reader.py") + " " + out + " > " + listing + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text_file(listing);

  std::map<std::string, std::string> lines;
  std::istringstream in(read_text_file(listing));
  for (std::string line; std::getline(in, line);) lines[line.substr(0, line.find(' '))] = line;
  ASSERT_EQ(lines.size(), 6u) << read_text_file(listing);
  for (const auto& item : run.modules[0]->named_parameters()) {
    ASSERT_EQ(lines.count(item.key()), 1u) << item.key();
    std::istringstream ls(lines[item.key()]);
    std::string name, tok;
    ls >> name;
    std::vector<int64_t> shape;
    while (ls >> tok && tok != "|") shape.push_back(std::stoll(tok));
    double sum = 0;
    uint64_t crc = 0;
    ls >> sum >> crc;
    const auto& p = item.value();
    EXPECT_EQ(shape, p.sizes().vec()) << name;
    const double want = p.to(torch::kFloat64).sum().item<double>();
    EXPECT_NEAR(sum, want, kSumRelTol * std::max(1.0, std::abs(want))) << name;
    const auto c = p.contiguous();
    const auto want_crc = ::crc32(0L, reinterpret_cast<const Bytef*>(c.data_ptr<float>()),
                                  static_cast<uInt>(c.numel() * 4));
    EXPECT_EQ(crc, want_crc) << name;
  }
}

TEST(SafetensorsExport, BadInputIsAUsageError) {
  ScratchDir dir;
  EXPECT_THROW(export_safetensors(dir / "missing", dir / "x.safetensors"), UsageError);
  trained_world3(dir);
  EXPECT_THROW(export_safetensors(dir.path(), dir / "no/such/dir/x.safetensors"), UsageError);
  // A corrupt shard is refused before anything is written.
  {
    std::fstream f(dir / "step_3/rank_2.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  try {
    export_safetensors(dir.path(), dir / "x.safetensors");
    ADD_FAILURE() << "corrupt shard exported";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("rank_2.bin: corrupt"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "x.safetensors"));
}

}  // namespace
}  // namespace zoff::checkpoint::safetensors_export_test
