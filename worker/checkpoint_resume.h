// File: worker/checkpoint_resume.h
// Resuming a job from the newest checkpoint that every rank can use. Each rank lists the kept
// checkpoints of its checkpoint directory (worker/checkpoint_store.h); in rounds over the
// collectives, the ranks take the newest step any of them still offers, each loads its file of
// that step, and they agree on it only when every rank loaded it. A corrupt, truncated, foreign
// or missing file on any rank sends all ranks to the next older step together, with a warning
// naming the file and the reason; so all ranks always resume from the same step.
//
//   const ResumePoint r = checkpoint_resume(dir, model, opt, *coll, [&](const std::string& w) { log(w); });
//   if (r.found) start_at(r.meta.step);
//
// Called by every rank of the job at the same point (it runs collectives). With no checkpoint on
// any rank it returns found = false (train from scratch); when checkpoints exist but no step is
// usable everywhere it throws, naming every file this rank tried and why each was refused. The
// model and optimizer hold the agreed checkpoint's state on return (a file that fails its checks
// leaves them as they were; one that loads but is refused elsewhere is overwritten by the next).
#pragma once

#include <functional>
#include <string>

#include "worker/checkpoint.h"
#include "worker/dist/collectives.h"

namespace qsync {

struct ResumePoint {
  bool found = false;  // false: no rank has a checkpoint
  std::string path;    // the file this rank loaded
  CheckpointMeta meta;
};

using ResumeWarning = std::function<void(const std::string&)>;

ResumePoint checkpoint_resume(const std::string& dir, Model& model, Optimizer& opt, Collectives& coll,
                              const ResumeWarning& warn);

}  // namespace qsync
