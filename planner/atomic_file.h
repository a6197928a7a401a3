// File: planner/atomic_file.h
// Writes a whole file atomically: a temp file beside it, fsync, rename, fsync of the directory.
// A crash leaves the old file or the new one, never a torn one. Used for plans and checkpoints;
// atomic_file_link gives a file a second name the same way (latest.qckpt beside step-<N>.qckpt).
#pragma once

#include <string>
#include <string_view>

namespace qsync {

void atomic_file_write(const std::string& path, std::string_view bytes);
// Makes `path` a second name of the file `existing` (a hard link at a temp name beside `path`,
// renamed onto it, then an fsync of the directory): readers of `path` see the old file or the
// new one. Returns false, leaving `path` as it was, when the filesystem has no hard links (the
// caller writes a copy instead); other failures throw naming both paths.
bool atomic_file_link(const std::string& existing, const std::string& path);
// Reads a whole file; throws std::runtime_error naming the path when it cannot.
std::string file_read_all(const std::string& path);

}  // namespace qsync
