// File: tests/support/metrics_text.cpp
// A small parser of the text exposition format 0.0.4: comment lines are skipped, a sample line is
// `name{label="value",...} value [timestamp]`; label values may escape \\, \" and \n.
#include "tests/support/metrics_text.h"

#include <cstdlib>
#include <limits>
#include <stdexcept>

namespace qsync::test {
namespace {

[[noreturn]] void fail(const std::string& line, const std::string& what) {
  throw std::runtime_error("cannot parse metrics line '" + line + "': " + what);
}

MetricSample parse_line(const std::string& line) {
  MetricSample s;
  size_t i = line.find_first_of("{ ");
  if (i == std::string::npos || i == 0) fail(line, "no metric name");
  s.name = line.substr(0, i);
  if (line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      const size_t eq = line.find('=', i);
      if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') fail(line, "bad label");
      const std::string key = line.substr(i, eq - i);
      std::string value;
      size_t j = eq + 2;
      for (; j < line.size() && line[j] != '"'; ++j) {
        if (line[j] == '\\' && j + 1 < line.size()) {
          ++j;
          value += line[j] == 'n' ? '\n' : line[j];
        } else {
          value += line[j];
        }
      }
      if (j >= line.size()) fail(line, "unterminated label value");
      s.labels[key] = value;
      i = j + 1;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) fail(line, "unterminated label set");
    ++i;
  }
  while (i < line.size() && line[i] == ' ') ++i;
  const std::string value = line.substr(i, line.find(' ', i) - i);
  if (value == "+Inf") {
    s.value = std::numeric_limits<double>::infinity();
  } else if (value == "-Inf") {
    s.value = -std::numeric_limits<double>::infinity();
  } else {
    char* end = nullptr;
    s.value = std::strtod(value.c_str(), &end);  // also reads NaN
    if (value.empty() || end != value.c_str() + value.size()) fail(line, "bad value '" + value + "'");
  }
  return s;
}

bool labels_include(const MetricSample& s, const std::map<std::string, std::string>& labels) {
  for (const auto& [k, v] : labels) {
    auto it = s.labels.find(k);
    if (it == s.labels.end() || it->second != v) return false;
  }
  return true;
}

}  // namespace

std::vector<MetricSample> parse_metrics_text(const std::string& text) {
  std::vector<MetricSample> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    const std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty() || line[0] == '#') continue;
    out.push_back(parse_line(line));
  }
  return out;
}

const MetricSample* find_sample(const std::vector<MetricSample>& samples, const std::string& name,
                                const std::map<std::string, std::string>& labels) {
  for (const MetricSample& s : samples)
    if (s.name == name && labels_include(s, labels)) return &s;
  return nullptr;
}

std::vector<MetricSample> find_samples(const std::vector<MetricSample>& samples, const std::string& name,
                                       const std::map<std::string, std::string>& labels) {
  std::vector<MetricSample> out;
  for (const MetricSample& s : samples)
    if (s.name == name && labels_include(s, labels)) out.push_back(s);
  return out;
}

}  // namespace qsync::test
