// File: worker/progress.h
// Progress output: on a terminal one rewritten line (step, loss, accuracy, samples/s, ETA);
// otherwise plain log lines every `log_every` steps.
#pragma once

#include <cstdint>
#include <string>

namespace qsync {

class ProgressReporter {
 public:
  // tty: rewrite a single line; `log_every`: plain-line period when not a tty.
  ProgressReporter(bool tty, int64_t log_every, std::string prefix = "");
  ~ProgressReporter();
  void step(int64_t step, int64_t total, double loss, double accuracy, double samples_per_second, double eta_seconds);
  // A message on its own line (clears the progress line first).
  void message(const std::string& line);

 private:
  bool tty_;
  int64_t log_every_;
  std::string prefix_;
  bool line_open_ = false;
};

// True when stdout is a terminal.
bool stdout_is_tty();
// "1h02m", "3m05s", "42s"
std::string format_duration(double seconds);

}  // namespace qsync
