// File: worker/progress.cpp
// Progress line and log lines.
#include "worker/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace qsync {

bool stdout_is_tty() { return isatty(STDOUT_FILENO) == 1; }

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  const long t = long(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

ProgressReporter::ProgressReporter(bool tty, int64_t log_every, std::string prefix)
    : tty_(tty), log_every_(log_every > 0 ? log_every : 50), prefix_(std::move(prefix)) {}

ProgressReporter::~ProgressReporter() {
  if (line_open_) std::printf("\n");
  std::fflush(stdout);
}

void ProgressReporter::step(int64_t step, int64_t total, double loss, double accuracy, double sps, double eta) {
  const bool last = step == total;
  if (!tty_ && step % log_every_ != 0 && !last && step != 1) return;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%sstep %lld/%lld  loss %.4f  acc %5.1f%%  %.0f samples/s  ETA %s", prefix_.c_str(),
                (long long)step, (long long)total, loss, accuracy * 100.0, sps, format_duration(eta).c_str());
  if (tty_) {
    std::printf("\r\033[K%s", buf);
    line_open_ = true;
  } else {
    std::printf("%s\n", buf);
  }
  std::fflush(stdout);
}

void ProgressReporter::message(const std::string& line) {
  if (line_open_) std::printf("\r\033[K");
  std::printf("%s%s\n", prefix_.c_str(), line.c_str());
  line_open_ = false;
  std::fflush(stdout);
}

}  // namespace qsync
