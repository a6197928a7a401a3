// File: worker/checkpoint.cpp
// Checkpoint file layout (little endian):
//   "QSYNCCKP" | u32 version | u64 model_hash | i64 step | i64 data_epoch | i64 data_index |
//   u64 seed | u32 optimizer kind | i64 optimizer updates |
//   (version 2) f64 loss scale | i64 loss-scale clean steps | u32 tensor count |
//   per tensor: u32 name length, name, i64 numel, numel * f32 |
//   (version 3) u32 running-statistics buffer count | per buffer: the tensor record |
//   u64 FNV-1a checksum of everything before it
#include "worker/checkpoint.h"

#include <cstring>
#include <stdexcept>
#include <vector>

#include "planner/atomic_file.h"
#include "worker/byte_record.h"

namespace qsync {
namespace {

constexpr char MAGIC[8] = {'Q', 'S', 'Y', 'N', 'C', 'C', 'K', 'P'};

// Parameters then optimizer state, with names: "<param>" and "<param>#state<i>".
std::vector<std::pair<std::string, Tensor*>> named_tensors(const Model& model, Optimizer& opt) {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (Parameter* p : model.parameters()) out.emplace_back(p->name, &p->value);
  const std::vector<Tensor*> state = opt.state();
  const size_t per_param = model.parameters().empty() ? 0 : state.size() / model.parameters().size();
  for (size_t i = 0; i < state.size(); ++i)
    out.emplace_back(model.parameters()[i / per_param]->name + "#state" + std::to_string(i % per_param), state[i]);
  return out;
}

// Magic, version, the meta, the optimizer and its update count: everything before the tensors.
struct Header {
  CheckpointMeta meta;
  OptimizerKind optimizer = OptimizerKind::ADAMW;
  int64_t updates = 0;
};

Header read_header(ByteReader& r, const std::string& path) {
  char magic[8];
  r.get_bytes(magic, sizeof magic);
  if (std::memcmp(magic, MAGIC, sizeof magic) != 0)
    throw std::runtime_error(path + " is not a QSync checkpoint (bad magic)");
  const auto version = r.get<uint32_t>();
  if (version < 1 || version > CHECKPOINT_VERSION)
    throw std::runtime_error("checkpoint " + path + " has version " + std::to_string(version) + ", this worker reads " +
                             "versions 1 to " + std::to_string(CHECKPOINT_VERSION) +
                             ": resume it with the qsync-worker that wrote it, or delete it");
  Header h;
  h.meta.version = version;
  h.meta.model_hash = r.get<uint64_t>();
  h.meta.step = r.get<int64_t>();
  h.meta.data_epoch = r.get<int64_t>();
  h.meta.data_index = r.get<int64_t>();
  h.meta.seed = r.get<uint64_t>();
  h.optimizer = OptimizerKind(r.get<uint32_t>());
  h.updates = r.get<int64_t>();
  if (version >= 2) {
    h.meta.loss_scale.scale = r.get<double>();
    h.meta.loss_scale.clean_steps = r.get<int64_t>();
  }
  return h;
}

// The running statistics' buffers, named "<layer>.running_mean", in forward order.
std::vector<RunningStatistics::Buffer> named_buffers(const Model& model) {
  std::vector<RunningStatistics::Buffer> out;
  for (RunningStatistics* r : model.running_statistics())
    for (const RunningStatistics::Buffer& b : r->buffers()) out.push_back(b);
  return out;
}

void put_record(ByteWriter& w, const std::string& name, const void* data, int64_t numel) {
  w.put(uint32_t(name.size()));
  w.put_bytes(name.data(), name.size());
  w.put(numel);
  w.put_bytes(data, size_t(numel) * sizeof(float));
}

// A tensor record of the file: its name, size and where its values start.
struct Record {
  std::string name;
  int64_t numel;
  size_t offset;
};

// A u32 count, then that many records (bounds-checked: a truncated file is refused here).
std::vector<Record> read_records(ByteReader& r, const std::string& bytes, const std::string& path) {
  const auto count = r.get<uint32_t>();
  std::vector<Record> records;
  for (uint32_t i = 0; i < count; ++i) {
    const auto len = r.get<uint32_t>();
    r.need(len);
    Record rec{bytes.substr(r.pos, len), 0, 0};
    r.pos += len;
    rec.numel = r.get<int64_t>();
    if (rec.numel < 0 || rec.numel > (int64_t(1) << 40))
      throw std::runtime_error("checkpoint " + path + " is corrupt (tensor '" + rec.name + "' has " +
                               std::to_string(rec.numel) + " values); delete it or restore a good copy");
    r.need(size_t(rec.numel) * sizeof(float));
    rec.offset = r.pos;
    r.pos += size_t(rec.numel) * sizeof(float);
    records.push_back(std::move(rec));
  }
  return records;
}

// The records must name what the model holds, in order, with its sizes; `what` names the kind.
void check_records(const std::vector<Record>& records, const std::vector<std::pair<std::string, int64_t>>& want,
                   const std::string& path, const std::string& what) {
  if (records.size() != want.size())
    throw std::runtime_error("checkpoint " + path + " holds " + std::to_string(records.size()) + " " + what +
                             ", the model needs " + std::to_string(want.size()));
  for (size_t i = 0; i < records.size(); ++i)
    if (records[i].name != want[i].first || records[i].numel != want[i].second)
      throw std::runtime_error("checkpoint " + path + ": tensor '" + records[i].name + "' (" +
                               std::to_string(records[i].numel) + " values) does not match '" + want[i].first +
                               "' (" + std::to_string(want[i].second) + ")");
}

// The checksum must close the file exactly.
void check_checksum(ByteReader& r, const std::string& bytes, const std::string& path) {
  r.need(sizeof(uint64_t));
  uint64_t stored_sum = 0;
  std::memcpy(&stored_sum, bytes.data() + r.pos, sizeof stored_sum);
  if (r.pos + sizeof(uint64_t) != bytes.size() || fnv1a_64(bytes.data(), r.pos) != stored_sum)
    throw std::runtime_error("checkpoint " + path + " is corrupt (checksum mismatch); delete it or restore a good copy");
}

}  // namespace

std::string checkpoint_path(const std::string& dir) { return dir + "/latest.qckpt"; }

void checkpoint_save(const std::string& path, const Model& model, Optimizer& opt, const CheckpointMeta& meta) {
  ByteWriter w;
  w.put_bytes(MAGIC, sizeof MAGIC);
  w.put(CHECKPOINT_VERSION);
  w.put(model.desc().hash);
  w.put(meta.step);
  w.put(meta.data_epoch);
  w.put(meta.data_index);
  w.put(meta.seed);
  w.put(uint32_t(opt.config().kind));
  w.put(opt.updates_applied());
  w.put(meta.loss_scale.scale);
  w.put(meta.loss_scale.clean_steps);
  const auto tensors = named_tensors(model, opt);
  w.put(uint32_t(tensors.size()));
  for (const auto& [name, t] : tensors) {
    const Tensor host = tensor_to_host(*t);  // device tensors: a synchronous copy
    put_record(w, name, host.data(), host.numel());
  }
  const auto buffers = named_buffers(model);
  w.put(uint32_t(buffers.size()));
  for (const RunningStatistics::Buffer& b : buffers) put_record(w, b.name, b.values->data(), int64_t(b.values->size()));
  w.put(fnv1a_64(w.out.data(), w.out.size()));
  atomic_file_write(path, w.out);
}

// Reads the whole layout first (a truncated file is caught there, with the sizes), then checks
// the checksum, then the model, optimizer and tensor names; `model` and `opt` change only once
// every check has passed.
OptimizerKind checkpoint_optimizer_kind(const std::string& path) {
  const std::string bytes = file_read_all(path);
  ByteReader r(bytes, "checkpoint " + path, "delete it or restore a complete copy");
  return read_header(r, path).optimizer;
}

int64_t checkpoint_step(const std::string& path) {
  const std::string bytes = file_read_all(path);
  ByteReader r(bytes, "checkpoint " + path, "delete it or restore a complete copy");
  return read_header(r, path).meta.step;
}

CheckpointMeta checkpoint_load(const std::string& path, Model& model, Optimizer& opt) {
  const std::string bytes = file_read_all(path);
  ByteReader r(bytes, "checkpoint " + path, "delete it or restore a complete copy");
  const Header header = read_header(r, path);
  const CheckpointMeta& meta = header.meta;
  const auto kind = uint32_t(header.optimizer);
  const std::vector<Record> records = read_records(r, bytes, path);
  const std::vector<Record> buffer_records = meta.version >= 3 ? read_records(r, bytes, path) : std::vector<Record>{};
  check_checksum(r, bytes, path);
  if (meta.model_hash != model.desc().hash)
    throw std::runtime_error("checkpoint " + path + " belongs to another model (hash " + model_hash_string(meta.model_hash) +
                             "; this run trains '" + model.desc().name + "', hash " +
                             model_hash_string(model.desc().hash) +
                             "): use another --checkpoint-dir or the model the checkpoint was trained with");
  if (kind != uint32_t(opt.config().kind))
    throw std::runtime_error("checkpoint " + path + " was written with optimizer " +
                             optimizer_kind_name(OptimizerKind(kind)) + ", this run uses " +
                             optimizer_kind_name(opt.config().kind) + ": use the same optimizer to resume");
  const auto tensors = named_tensors(model, opt);
  std::vector<std::pair<std::string, int64_t>> want;
  for (const auto& [name, t] : tensors) want.emplace_back(name, t->numel());
  check_records(records, want, path, "tensors");
  const auto buffers = named_buffers(model);
  if (meta.version >= 3) {
    want.clear();
    for (const RunningStatistics::Buffer& b : buffers) want.emplace_back(b.name, int64_t(b.values->size()));
    check_records(buffer_records, want, path, "running-statistics buffers");
  }
  for (size_t i = 0; i < records.size(); ++i) {
    Tensor& t = *tensors[i].second;
    Tensor staged = Tensor::empty(t.shape(), Precision::FP32, nullptr, "checkpoint tensor");
    std::memcpy(staged.data(), bytes.data() + records[i].offset, size_t(t.bytes()));
    tensor_copy_from_host(staged, t);
  }
  for (size_t i = 0; i < buffer_records.size(); ++i)
    std::memcpy(buffers[i].values->data(), bytes.data() + buffer_records[i].offset, buffers[i].values->size() * sizeof(float));
  for (Parameter* p : model.parameters()) {  // INT8 copies made from the weights before are stale
    p->int8_rows = Tensor();
    p->int8_rows_step = -1;
  }
  opt.set_updates_applied(header.updates);
  return meta;
}

}  // namespace qsync
