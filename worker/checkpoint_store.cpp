// File: worker/checkpoint_store.cpp
// The kept checkpoints of a directory (checkpoint_store.h): listing step-<N>.qckpt files, saving
// one with latest.qckpt as its second name, and pruning after the save.
#include "worker/checkpoint_store.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "planner/atomic_file.h"

namespace qsync {
namespace {

namespace fs = std::filesystem;

constexpr const char* STEP_PREFIX = "step-";
constexpr const char* SUFFIX = ".qckpt";

// The N of "step-<N>.qckpt" (decimal digits only), or -1 for any other name (temp files begin
// with '.', so a half-written checkpoint is never listed).
int64_t step_of_name(const std::string& name) {
  const std::string prefix = STEP_PREFIX, suffix = SUFFIX;
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size() - suffix.size();
  if (!std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; })) return -1;
  int64_t step = -1;
  const auto [end, ec] = std::from_chars(first, last, step);
  return ec == std::errc() && end == last ? step : -1;
}

void remove_checkpoint(const std::string& path, std::vector<std::string>& removed) {
  std::error_code ec;
  if (!fs::remove(path, ec) && ec)
    throw std::runtime_error("cannot remove the old checkpoint '" + path + "': " + ec.message() +
                             " (the new checkpoint was saved); make the checkpoint directory writable");
  removed.push_back(path);
}

}  // namespace

std::string checkpoint_step_path(const std::string& dir, int64_t step) {
  return dir + "/" + STEP_PREFIX + std::to_string(step) + SUFFIX;
}

std::vector<CheckpointFile> checkpoint_files(const std::string& dir) {
  std::vector<CheckpointFile> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const int64_t step = step_of_name(entry.path().filename().string());
    if (step >= 0) out.push_back({step, checkpoint_step_path(dir, step)});
  }
  std::sort(out.begin(), out.end(), [](const CheckpointFile& a, const CheckpointFile& b) { return a.step > b.step; });
  if (out.empty() && fs::exists(checkpoint_path(dir), ec)) out.push_back({-1, checkpoint_path(dir)});
  return out;
}

CheckpointSaved checkpoint_save_kept(const std::string& dir, int64_t keep, const Model& model, Optimizer& opt,
                                     const CheckpointMeta& meta, int64_t own_from_step) {
  if (keep < 1)
    throw std::invalid_argument("--keep-checkpoints must be at least 1, got " + std::to_string(keep));
  fs::create_directories(dir);
  CheckpointSaved saved;
  saved.path = checkpoint_step_path(dir, meta.step);
  checkpoint_save(saved.path, model, opt, meta);
  const std::string latest = checkpoint_path(dir);
  if (!atomic_file_link(saved.path, latest)) atomic_file_write(latest, file_read_all(saved.path));
  int64_t kept = 0;
  for (const CheckpointFile& f : checkpoint_files(dir)) {
    if (f.step < 0) continue;
    if (f.step > meta.step || f.step < own_from_step)
      remove_checkpoint(f.path, saved.removed_stale);
    else if (++kept > keep)
      remove_checkpoint(f.path, saved.removed_older);
  }
  return saved;
}

}  // namespace qsync
