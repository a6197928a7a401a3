// File: worker/tp/transformer_weights_file.cpp
// The weights file of a transformer (distilled SPD weights live here, never in the training
// checkpoint). Layout, little endian:
//   "QSYNCTPW" | u32 version | u64 model_hash | u32 name length, name |
//   i64 vocab, max_tokens, width, mlp_width | u8 causal | i64 blocks | per block i64 heads |
//   tensors in a fixed order (embedding, position, per block ln1 g/b, qkv w/b, proj w/b, ln2 g/b,
//   fc1 w/b, fc2 w/b, then lnf g/b, head w/b), each i64 numel + numel * f32 |
//   u64 FNV-1a checksum of everything before it.
// Written atomically (planner/atomic_file.h); reading checks the magic, version, every size
// against the dimensions, and the checksum before returning anything.
#include <cstring>
#include <stdexcept>

#include "planner/atomic_file.h"
#include "worker/byte_record.h"
#include "worker/tp/transformer_weights.h"

namespace qsync {
namespace {

constexpr char WEIGHTS_MAGIC[8] = {'Q', 'S', 'Y', 'N', 'C', 'T', 'P', 'W'};
constexpr uint32_t WEIGHTS_VERSION = 1;

// Every tensor of `w` with its expected size, in file order. Works on const and non-const weights.
template <class W, class F>
void for_each_tensor(W& w, F&& f) {
  const int64_t C = w.width, F_ = w.mlp_width, V = w.vocab;
  f(w.token_embedding, V * C, "token_embedding");
  f(w.position_embedding, w.max_tokens * C, "position_embedding");
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    auto& b = w.blocks[i];
    const std::string p = "blocks." + std::to_string(i) + ".";
    f(b.ln1_gain, C, p + "ln1_gain");
    f(b.ln1_bias, C, p + "ln1_bias");
    f(b.qkv_weight, 3 * C * C, p + "qkv_weight");
    f(b.qkv_bias, 3 * C, p + "qkv_bias");
    f(b.proj_weight, C * C, p + "proj_weight");
    f(b.proj_bias, C, p + "proj_bias");
    f(b.ln2_gain, C, p + "ln2_gain");
    f(b.ln2_bias, C, p + "ln2_bias");
    f(b.fc1_weight, F_ * C, p + "fc1_weight");
    f(b.fc1_bias, F_, p + "fc1_bias");
    f(b.fc2_weight, C * F_, p + "fc2_weight");
    f(b.fc2_bias, C, p + "fc2_bias");
  }
  f(w.lnf_gain, C, "lnf_gain");
  f(w.lnf_bias, C, "lnf_bias");
  f(w.head_weight, V * C, "head_weight");
  f(w.head_bias, V, "head_bias");
}

[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  throw std::runtime_error("weights file " + path + " is corrupt (" + what +
                           "); delete it and write it again with `qsync-worker spd-plan`");
}

}  // namespace

void transformer_weights_save(const TransformerWeights& w, const std::string& path) {
  ByteWriter out;
  out.put_bytes(WEIGHTS_MAGIC, sizeof WEIGHTS_MAGIC);
  out.put(WEIGHTS_VERSION);
  out.put(w.model_hash);
  out.put(uint32_t(w.model_name.size()));
  out.put_bytes(w.model_name.data(), w.model_name.size());
  out.put(w.vocab);
  out.put(w.max_tokens);
  out.put(w.width);
  out.put(w.mlp_width);
  out.put(uint8_t(w.causal ? 1 : 0));
  out.put(int64_t(w.blocks.size()));
  for (const BlockWeights& b : w.blocks) out.put(b.heads);
  for_each_tensor(w, [&](const std::vector<float>& t, int64_t numel, const std::string& name) {
    if (int64_t(t.size()) != numel)
      throw std::invalid_argument("transformer_weights_save: tensor " + name + " has " + std::to_string(t.size()) +
                                  " values, the dimensions say " + std::to_string(numel));
    out.put(numel);
    out.put_bytes(t.data(), t.size() * sizeof(float));
  });
  out.put(fnv1a_64(out.out.data(), out.out.size()));
  atomic_file_write(path, out.out);
}

TransformerWeights transformer_weights_read(const std::string& path) {
  const std::string bytes = file_read_all(path);
  ByteReader r(bytes, "weights file " + path, "write it again with `qsync-worker spd-plan`");
  char magic[8];
  r.need(sizeof magic);
  std::memcpy(magic, bytes.data(), sizeof magic);
  r.pos = sizeof magic;
  if (std::memcmp(magic, WEIGHTS_MAGIC, sizeof magic) != 0)
    throw std::runtime_error(path + " is not a QSync transformer weights file (bad magic); pass the file that "
                             "`qsync-worker spd-plan` wrote");
  const auto version = r.get<uint32_t>();
  if (version != WEIGHTS_VERSION)
    throw std::runtime_error("weights file " + path + " has version " + std::to_string(version) +
                             ", this worker reads " + std::to_string(WEIGHTS_VERSION));
  // The checksum first: a damaged header must not turn into absurd sizes below.
  if (bytes.size() < r.pos + sizeof(uint64_t)) corrupt(path, "no checksum");
  uint64_t stored_sum = 0;
  const size_t body = bytes.size() - sizeof(uint64_t);
  std::memcpy(&stored_sum, bytes.data() + body, sizeof stored_sum);
  if (fnv1a_64(bytes.data(), body) != stored_sum) corrupt(path, "checksum mismatch");

  TransformerWeights w;
  w.model_hash = r.get<uint64_t>();
  const auto name_len = r.get<uint32_t>();
  r.need(name_len);
  w.model_name = bytes.substr(r.pos, name_len);
  r.pos += name_len;
  w.vocab = r.get<int64_t>();
  w.max_tokens = r.get<int64_t>();
  w.width = r.get<int64_t>();
  w.mlp_width = r.get<int64_t>();
  w.causal = r.get<uint8_t>() != 0;
  const auto blocks = r.get<int64_t>();
  constexpr int64_t LIMIT = int64_t(1) << 24;
  if (w.vocab < 1 || w.vocab > LIMIT || w.max_tokens < 1 || w.max_tokens > LIMIT || w.width < 1 || w.width > LIMIT ||
      w.mlp_width < 1 || w.mlp_width > LIMIT || blocks < 1 || blocks > 4096)
    corrupt(path, "implausible dimensions");
  w.blocks.resize(size_t(blocks));
  for (BlockWeights& b : w.blocks) {
    b.heads = r.get<int64_t>();
    if (b.heads < 1 || w.width % b.heads != 0) corrupt(path, "a block's head count does not divide the width");
  }
  for_each_tensor(w, [&](std::vector<float>& t, int64_t numel, const std::string& name) {
    const auto stored = r.get<int64_t>();
    if (stored != numel)
      corrupt(path, "tensor " + name + " holds " + std::to_string(stored) + " values, the dimensions say " +
                        std::to_string(numel));
    r.need(size_t(numel) * sizeof(float));
    t.resize(size_t(numel));
    std::memcpy(t.data(), bytes.data() + r.pos, size_t(numel) * sizeof(float));
    r.pos += size_t(numel) * sizeof(float);
  });
  if (r.pos != body) corrupt(path, std::to_string(body - r.pos) + " unexpected bytes after the last tensor");
  return w;
}

}  // namespace qsync
