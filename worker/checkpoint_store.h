// File: worker/checkpoint_store.h
// A checkpoint directory that keeps the last K checkpoints, so that a resume can fall back to an
// older one when the newest is corrupt (worker/checkpoint_resume.h):
//
//   <dir>/step-<N>.qckpt   one per kept checkpoint (N: steps completed), each written atomically
//   <dir>/latest.qckpt     the newest of them under a second name (a hard link, or a copy where
//                          the filesystem has none), for readers that take one file
//
// A save writes step-<N>.qckpt, points latest.qckpt at it, and only then removes what is no longer
// kept: step files beyond the newest `keep`, and stale ones: of a step later than N (a resume went
// back before them: they belong to a run the job abandoned) or, for a run that started from
// scratch, of a step before its first checkpoint (an earlier run's, which it replaces). The disk
// must therefore hold keep + 1 checkpoints while a save runs. A directory written before
// retention holds latest.qckpt alone; checkpoint_files lists it then.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/checkpoint.h"

namespace qsync {

inline constexpr int64_t DEFAULT_KEEP_CHECKPOINTS = 2;

struct CheckpointFile {
  int64_t step = -1;  // -1: latest.qckpt of a directory without step files (its header says the step)
  std::string path;
};

// <dir>/step-<step>.qckpt
std::string checkpoint_step_path(const std::string& dir, int64_t step);

// The directory's step-<N>.qckpt files, newest first; without any, latest.qckpt when it exists
// (step -1); nothing for a directory that does not exist.
std::vector<CheckpointFile> checkpoint_files(const std::string& dir);

struct CheckpointSaved {
  std::string path;                        // step-<N>.qckpt
  std::vector<std::string> removed_older;  // pruned beyond `keep`
  std::vector<std::string> removed_stale;  // of a step after N, or before `own_from_step`
};

// Writes meta.step's checkpoint into `dir` (created if missing) and prunes as described above.
// `own_from_step`: the first step whose files are this run's (the step of its first save when it
// started from scratch; 0 when it resumed: the older files are its fallbacks). Throws naming the
// file for a failed write (nothing is removed then) or a failed removal.
CheckpointSaved checkpoint_save_kept(const std::string& dir, int64_t keep, const Model& model, Optimizer& opt,
                                     const CheckpointMeta& meta, int64_t own_from_step = 0);

}  // namespace qsync
