// SafetensorsFile: a .safetensors header checked, tensors read one at a time with pread.
#include "zoff/checkpoint/safetensors_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "zoff/checkpoint/atomic_file.h"
#include "zoff/checkpoint/replicated_sections.h"
#include "zoff/core/error.h"

namespace zoff::checkpoint {
namespace {

// The spec caps the JSON header at 100 MB; a larger length is a damaged or foreign file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// O_DIRECT wants file offsets, lengths and buffers aligned to the device's logical block
// (512 B or 4 KiB); 4 KiB serves both. Reads go in chunks of kDirectChunk through a buffer of
// each reading thread's own (the streamed weights' reader thread and the compute thread).
constexpr uint64_t kDirectAlign = 4096;
constexpr uint64_t kDirectChunk = uint64_t{8} << 20;

struct ChunkBuffer {
  void* data = nullptr;
  ~ChunkBuffer() { std::free(data); }
};

char* thread_chunk_buffer() {
  thread_local ChunkBuffer buffer;
  if (buffer.data == nullptr) buffer.data = std::aligned_alloc(kDirectAlign, kDirectChunk);
  ZOFF_CHECK(buffer.data != nullptr, "cannot allocate a ", kDirectChunk, "-byte read buffer");
  return static_cast<char*>(buffer.data);
}

SafetensorsFile::Entry parse_entry(const std::string& path, const std::string& name,
                                   const nlohmann::json& j, uint64_t data_bytes) {
  SafetensorsFile::Entry e;
  try {
    e.dtype = j.at("dtype").get<std::string>();
    e.shape = j.at("shape").get<std::vector<int64_t>>();
    const auto offsets = j.at("data_offsets").get<std::vector<uint64_t>>();
    ZOFF_CHECK_ARG(offsets.size() == 2, path, ": tensor ", name, ": data_offsets needs 2 values");
    e.begin = offsets[0];
    e.end = offsets[1];
  } catch (const nlohmann::json::exception& ex) {
    throw UsageError(
        detail::concat(path, ": tensor ", name, ": malformed entry (", ex.what(), ")"));
  }
  uint64_t numel = 1;
  for (int64_t d : e.shape) {
    ZOFF_CHECK_ARG(d >= 0, path, ": tensor ", name, ": negative dimension ", d);
    numel *= static_cast<uint64_t>(d);
  }
  const auto elem = static_cast<uint64_t>(torch::elementSize(dtype_from_name(e.dtype)));
  ZOFF_CHECK_ARG(e.begin <= e.end && e.end <= data_bytes && e.end - e.begin == numel * elem, path,
                 ": tensor ", name, ": bytes [", e.begin, ", ", e.end, ") do not hold ", numel, " ",
                 e.dtype, " elements inside the file's ", data_bytes, " data bytes");
  return e;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ZOFF_CHECK_ARG(fd_ >= 0, "cannot read ", path, ": ", std::strerror(errno));
  try {
    struct stat st {};
    ZOFF_CHECK_ARG(::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode), path, ": not a regular file");
    const auto file_bytes = static_cast<uint64_t>(st.st_size);
    uint64_t n = 0;
    ZOFF_CHECK_ARG(file_bytes >= sizeof n, path, ": ", file_bytes,
                   " bytes, too short for a safetensors file");
    read_exact(fd_, path, 0, &n, sizeof n);
    ZOFF_CHECK_ARG(n <= kMaxHeaderBytes && n <= file_bytes - sizeof n, path, ": header length ", n,
                   " is not a safetensors header (file of ", file_bytes, " bytes)");
    std::string text(n, '\0');
    read_exact(fd_, path, sizeof n, text.data(), n);
    data_start_ = sizeof n + n;
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw UsageError(detail::concat(path, ": header is not JSON (", e.what(), ")"));
    }
    ZOFF_CHECK_ARG(header.is_object(), path, ": header is not a JSON object");
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") continue;
      entries_[name] = parse_entry(path, name, value, file_bytes - data_start_);
    }
    if (header.contains("__metadata__") && header["__metadata__"].is_object()) {
      for (const auto& [key, value] : header["__metadata__"].items()) {
        if (value.is_string()) metadata_[key] = value.get<std::string>();
      }
    }
    if (header.contains("__metadata__") && header["__metadata__"].contains("aliases")) {
      const auto aliases =
          nlohmann::json::parse(header["__metadata__"]["aliases"].get<std::string>());
      for (const auto& [second, first] : aliases.items()) {
        ZOFF_CHECK_ARG(entries_.count(first.get<std::string>()) == 1, path, ": alias ", second,
                       " names no tensor");
        aliases_[second] = first.get<std::string>();
      }
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  ::close(fd_);
  if (direct_fd_ >= 0) ::close(direct_fd_);
}

bool SafetensorsFile::use_direct_reads() {
  if (direct_fd_ < 0) direct_fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  return direct_fd_ >= 0;
}

void SafetensorsFile::read_direct(uint64_t offset, void* out, uint64_t bytes) const {
  char* chunk = thread_chunk_buffer();
  auto* dst = static_cast<char*>(out);
  const uint64_t end = offset + bytes;
  for (uint64_t pos = offset; pos < end;) {
    const uint64_t at = pos / kDirectAlign * kDirectAlign;
    const uint64_t want =
        std::min(kDirectChunk, (end - at + kDirectAlign - 1) / kDirectAlign * kDirectAlign);
    ssize_t n = -1;
    do {
      n = ::pread(direct_fd_, chunk, want, static_cast<off_t>(at));
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EINVAL) {  // the file system refused this read: buffered instead
      read_exact(fd_, path_, pos, dst, end - pos);
      return;
    }
    ZOFF_CHECK(n >= 0, "cannot read ", path_, ": ", std::strerror(errno));
    const uint64_t got_end = at + static_cast<uint64_t>(n);
    ZOFF_CHECK_ARG(got_end > pos, path_, ": truncated (ends before byte ", end, ")");
    const uint64_t take = std::min(got_end, end) - pos;
    std::memcpy(dst, chunk + (pos - at), take);
    dst += take;
    pos += take;
  }
}

std::vector<std::string> SafetensorsFile::names() const {
  std::set<std::string> all;
  for (const auto& [name, e] : entries_) all.insert(name);
  for (const auto& [name, first] : aliases_) all.insert(name);
  return {all.begin(), all.end()};
}

bool SafetensorsFile::contains(const std::string& name) const {
  return entries_.count(name) == 1 || aliases_.count(name) == 1;
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  const auto alias = aliases_.find(name);
  const auto it = entries_.find(alias != aliases_.end() ? alias->second : name);
  ZOFF_CHECK_ARG(it != entries_.end(), path_, " has no tensor '", name, "'");
  return it->second;
}

torch::Tensor SafetensorsFile::read(const std::string& name) const {
  const Entry& e = entry(name);
  auto t = torch::empty(e.shape, torch::TensorOptions().dtype(dtype_from_name(e.dtype)));
  read_exact(fd_, path_, data_start_ + e.begin, t.data_ptr(), e.end - e.begin);
  return t;
}

void SafetensorsFile::read_into(const std::string& name, torch::Tensor& out) const {
  const Entry& e = entry(name);
  ZOFF_CHECK_ARG(out.sizes().vec() == e.shape, path_, ": tensor ", name, " is ",
                 torch::IntArrayRef(e.shape), ", the destination is ", out.sizes());
  if (out.is_contiguous() && out.scalar_type() == dtype_from_name(e.dtype)) {
    if (direct_fd_ >= 0 && e.end - e.begin >= kDirectMinBytes) {
      read_direct(data_start_ + e.begin, out.data_ptr(), e.end - e.begin);
    } else {
      read_exact(fd_, path_, data_start_ + e.begin, out.data_ptr(), e.end - e.begin);
    }
    return;
  }
  torch::NoGradGuard no_grad;
  out.copy_(read(name));
}

namespace {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Every module tensor is in the file with its shape, and every file tensor in the module.
void check_against_module(const SafetensorsFile& file, const NamedTensors& tensors) {
  const std::string& path = file.path();
  std::set<std::string> in_module;
  for (const auto& [name, t] : tensors) {
    ZOFF_CHECK_ARG(file.contains(name), "--init-from ", path, " has no tensor '", name,
                   "', which the model has");
    const auto& shape = file.entry(name).shape;
    ZOFF_CHECK_ARG(t.sizes().vec() == shape, "--init-from ", path, ": tensor ", name, " is ",
                   torch::IntArrayRef(shape), ", the model's is ", t.sizes());
    in_module.insert(name);
  }
  for (const auto& name : file.names()) {
    ZOFF_CHECK_ARG(in_module.count(name) == 1, "--init-from ", path, " has tensor ", name,
                   ", which the model does not have");
  }
}

NamedTensors named_tensors(torch::nn::Module& module, bool parameters, bool buffers) {
  NamedTensors tensors;
  if (parameters) {
    for (auto& item : module.named_parameters()) tensors.emplace_back(item.key(), item.value());
  }
  if (buffers) {
    for (auto& item : module.named_buffers()) tensors.emplace_back(item.key(), item.value());
  }
  return tensors;
}

}  // namespace

void load_module_from_safetensors(torch::nn::Module& module, const std::string& path) {
  SafetensorsFile file(path);
  auto tensors = named_tensors(module, true, true);
  check_against_module(file, tensors);  // names and shapes both ways, before anything changes
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : tensors) file.read_into(name, t);
}

unit::ParamInit safetensors_param_init(torch::nn::Module& module, const std::string& path,
                                       bool direct_reads) {
  auto file = std::make_shared<SafetensorsFile>(path);
  if (direct_reads) file->use_direct_reads();  // else (tmpfs) buffered, as without
  check_against_module(*file, named_tensors(module, true, true));
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : named_tensors(module, false, true)) file->read_into(name, t);
  return [file](const std::string& name, torch::Tensor values) { file->read_into(name, values); };
}

}  // namespace zoff::checkpoint
