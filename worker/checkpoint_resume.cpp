// File: worker/checkpoint_resume.cpp
// The ranks' agreement on the checkpoint to resume from (checkpoint_resume.h). Two all_gathers a
// round: the step each rank offers (its newest untried one, 0 for none, else step + 1), then
// whether each loaded the largest offer.
#include "worker/checkpoint_resume.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "worker/checkpoint_store.h"

namespace qsync {
namespace {

std::vector<uint64_t> gather(Collectives& coll, uint64_t mine) {
  std::vector<uint64_t> all(size_t(coll.world_size()));
  coll.all_gather(&mine, all.data(), 1);
  return all;
}

// "rank 1" / "ranks 1, 3": the ranks whose answer is 0 ("" when every rank said yes).
std::string ranks_without(const std::vector<uint64_t>& answers) {
  std::string names;
  int count = 0;
  for (size_t r = 0; r < answers.size(); ++r) {
    if (answers[r] != 0) continue;
    names += (count++ ? ", " : "") + std::to_string(r);
  }
  return count == 0 ? "" : (count == 1 ? "rank " : "ranks ") + names;
}

// The directory's kept checkpoints, newest first; latest.qckpt of a directory from before
// retention gets its step from its header (a header that cannot be read refuses it here).
std::vector<CheckpointFile> candidates(const std::string& dir, std::vector<std::string>& refused,
                                       const ResumeWarning& warn) {
  std::vector<CheckpointFile> files = checkpoint_files(dir);
  if (files.size() == 1 && files[0].step < 0) {
    try {
      files[0].step = checkpoint_step(files[0].path);
    } catch (const std::exception& e) {
      refused.push_back(e.what());
      warn(std::string("cannot resume from ") + files[0].path + ": " + e.what());
      files.clear();
    }
  }
  return files;
}

// Loads `path` as the checkpoint of `step`; "" on success, else why not.
std::string try_load(const std::string& path, int64_t step, Model& model, Optimizer& opt, CheckpointMeta& meta) {
  try {
    meta = checkpoint_load(path, model, opt);
  } catch (const std::exception& e) {
    return e.what();
  }
  if (meta.step != step)
    return "checkpoint " + path + " holds step " + std::to_string(meta.step) + ", not step " + std::to_string(step) +
           " (was it renamed?); delete it or give it its own step's name";
  return "";
}

}  // namespace

ResumePoint checkpoint_resume(const std::string& dir, Model& model, Optimizer& opt, Collectives& coll,
                              const ResumeWarning& warn) {
  const int rank = coll.rank();
  std::vector<std::string> refused;  // one line per file this rank tried, naming it and why not
  std::vector<CheckpointFile> files = candidates(dir, refused, warn);
  size_t next = 0;
  bool offered = false;
  for (;;) {
    const std::vector<uint64_t> offers = gather(coll, next < files.size() ? uint64_t(files[next].step) + 1 : 0);
    const uint64_t newest = *std::max_element(offers.begin(), offers.end());
    if (newest == 0) break;
    offered = true;
    const int64_t step = int64_t(newest - 1);
    ResumePoint here;
    here.path = checkpoint_step_path(dir, step);
    std::string why;
    if (next < files.size() && files[next].step == step) {
      here.path = files[next++].path;
      why = try_load(here.path, step, model, opt, here.meta);
    } else {
      why = "checkpoint " + here.path + " is missing on rank " + std::to_string(rank) +
            " (another rank has it): give every rank the same checkpoint directory";
    }
    const std::string then = next < files.size() ? "; trying the next older checkpoint" : "; no older checkpoint here";
    if (!why.empty()) {
      refused.push_back(why);
      warn("cannot resume from step " + std::to_string(step) + ": " + why + then);
    }
    const std::string failed = ranks_without(gather(coll, why.empty() ? 1 : 0));
    if (failed.empty()) {
      here.found = true;
      return here;
    }
    if (why.empty()) {
      refused.push_back("checkpoint " + here.path + " loaded here, but " + failed + " could not use step " +
                        std::to_string(step));
      warn(refused.back() + then);
    }
  }
  if (!offered) return {};
  std::string list;
  for (const std::string& r : refused) list += "\n  - " + r;
  throw std::runtime_error("no checkpoint in " + dir + " can be resumed from on every rank; rank " +
                           std::to_string(rank) + " tried " + std::to_string(refused.size()) + ":" + list +
                           "\nrestore a good copy of one of them, or move the directory away to train from scratch");
}

}  // namespace qsync
