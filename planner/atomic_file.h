// File: planner/atomic_file.h
// Writes a whole file atomically: a temp file beside it, fsync, rename, fsync of the directory.
// A crash leaves the old file or the new one, never a torn one. Used for plans and checkpoints.
#pragma once

#include <string>
#include <string_view>

namespace qsync {

void atomic_file_write(const std::string& path, std::string_view bytes);
// Reads a whole file; throws std::runtime_error naming the path when it cannot.
std::string file_read_all(const std::string& path);

}  // namespace qsync
