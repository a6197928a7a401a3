// File: worker/data/char_corpus.cpp
// Character vocabulary, encoding/decoding and the train/validation split of a text corpus read
// from one text file or from a folder of them (e.g. the fortunes package's quotation files).
#include "worker/data/char_corpus.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace qsync {

namespace {

std::string percent(double fraction) {  // 0.1 -> "10%"
  std::ostringstream s;
  s << fraction * 100.0 << "%";
  return s.str();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("char corpus " + path + ": cannot open (" + std::strerror(errno) +
                             "); pass an existing text file or folder of text files with --data");
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) {
    throw std::runtime_error("char corpus " + path + ": read error after " + std::to_string(text.size()) +
                             " bytes; check the file and the disk");
  }
  return text;
}

// A file is binary when its first 4 KiB hold a NUL byte (fortune's .dat index files do).
bool looks_binary(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[4096];
  in.read(head, sizeof head);
  return std::memchr(head, '\0', size_t(in.gcount())) != nullptr;
}

// The regular files of folder `dir` (not its subfolders), in name order, less binary files and
// *.u8 files (fortune's UTF-8 copies of the same text); throws when none is left.
std::vector<std::string> text_files_in(const std::string& dir) {
  std::vector<std::filesystem::path> entries;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec)) entries.push_back(entry.path());
  }
  if (ec) {
    throw std::runtime_error("char corpus " + dir + ": cannot list the folder (" + ec.message() +
                             "); pass a readable folder of text files with --data");
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.filename().string() < b.filename().string(); });
  std::vector<std::string> files;
  int64_t skipped = 0;
  for (const auto& p : entries) {
    if (p.extension() == ".u8" || looks_binary(p.string())) {
      ++skipped;
    } else {
      files.push_back(p.string());
    }
  }
  if (files.empty()) {
    throw std::runtime_error("char corpus " + dir + ": the folder holds no text file (" + std::to_string(skipped) +
                             " binary or *.u8 files skipped, subfolders are not read); pass a folder of text "
                             "files or a text file with --data");
  }
  return files;
}

// Lines that are exactly "%" (fortune(6)'s separator between quotations) become empty lines.
std::string fortune_separators_as_empty_lines(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    if (!(end - begin == 1 && text[begin] == '%')) out.append(text, begin, end - begin);
    if (end < text.size()) out += '\n';
    begin = end + 1;
  }
  return out;
}

}  // namespace

int32_t char_to_token(unsigned char c) {
  if (c >= 32 && c <= 126) return int32_t(c) - 32;
  if (c == '\n') return CHAR_NEWLINE_TOKEN;
  if (c == '\t') return 0;
  return -1;
}

char token_to_char(int32_t t) {
  if (t >= 0 && t < CHAR_NEWLINE_TOKEN) return char(t + 32);
  if (t == CHAR_NEWLINE_TOKEN) return '\n';
  throw std::out_of_range("char corpus: token " + std::to_string(t) + " is outside the vocabulary 0.." +
                          std::to_string(CHAR_VOCAB_SIZE - 1) + "; the model's output layer must have " +
                          std::to_string(CHAR_VOCAB_SIZE) + " classes");
}

std::vector<int32_t> char_encode(std::string_view text) {
  std::vector<int32_t> tokens;
  tokens.reserve(text.size());
  for (char ch : text) {
    int32_t t = char_to_token(static_cast<unsigned char>(ch));
    if (t >= 0) tokens.push_back(t);
  }
  return tokens;
}

std::string char_decode(const int32_t* tokens, int64_t n) {
  std::string text(size_t(n), ' ');
  for (int64_t i = 0; i < n; ++i) {
    int32_t t = tokens[i];
    if (t < 0 || t >= CHAR_VOCAB_SIZE) {
      throw std::out_of_range("char_decode: token " + std::to_string(t) + " at position " + std::to_string(i) +
                              " is outside the vocabulary 0.." + std::to_string(CHAR_VOCAB_SIZE - 1));
    }
    text[size_t(i)] = token_to_char(t);
  }
  return text;
}

std::string char_decode(const std::vector<int32_t>& tokens) {
  return char_decode(tokens.data(), int64_t(tokens.size()));
}

std::string char_decode(const float* tokens, int64_t n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float v = tokens[i];
    if (!(v >= 0.0f && v < float(CHAR_VOCAB_SIZE)) || v != std::floor(v)) {
      throw std::out_of_range("char_decode: value " + std::to_string(v) + " at position " + std::to_string(i) +
                              " is not a token id (an integer in 0.." + std::to_string(CHAR_VOCAB_SIZE - 1) + ")");
    }
    ids[size_t(i)] = int32_t(v);
  }
  return char_decode(ids.data(), n);
}

CharCorpus char_corpus_from_text(std::string_view text, int64_t seq_len, double validation_fraction,
                                 const std::string& source) {
  if (seq_len <= 0) {
    throw std::invalid_argument("char corpus " + source + ": seq_len " + std::to_string(seq_len) +
                                " must be positive (the model's input seq_len)");
  }
  if (!(validation_fraction >= 0.0 && validation_fraction < 1.0)) {
    throw std::invalid_argument("char corpus " + source + ": validation fraction " + percent(validation_fraction) +
                                " must be in [0, 1) (e.g. 0.1 holds out the last 10%; 0 holds out nothing)");
  }
  CharCorpus c;
  c.source = source;
  c.bytes_read = int64_t(text.size());
  std::vector<int32_t> tokens = char_encode(text);
  c.bytes_dropped = c.bytes_read - int64_t(tokens.size());
  if (tokens.empty()) {
    throw std::runtime_error("char corpus " + source + ": " +
                             (text.empty() ? std::string("the file is empty")
                                           : std::to_string(text.size()) + " bytes but no printable ASCII text") +
                             "; pass a text file (--data FILE) with at least a few thousand characters");
  }
  const int64_t n = int64_t(tokens.size());
  const int64_t n_val = int64_t(std::floor(double(n) * validation_fraction));
  const int64_t n_train = n - n_val;
  const int64_t window = seq_len + 1;
  auto too_short = [&](const char* part, int64_t have) {
    throw std::runtime_error("char corpus " + source + ": the " + part + " part has " + std::to_string(have) +
                             " characters, fewer than one window of seq_len + 1 = " + std::to_string(window) +
                             " (file: " + std::to_string(n) + " usable characters, " + percent(validation_fraction) +
                             " held out for validation" +
                             "); use a longer text file, a shorter seq_len or a different validation fraction");
  };
  if (n_train < window) too_short("training", n_train);
  if (validation_fraction > 0.0 && n_val < window) too_short("validation", n_val);
  c.train.assign(tokens.begin(), tokens.begin() + n_train);
  c.validation.assign(tokens.begin() + n_train, tokens.end());
  return c;
}

CharCorpus char_corpus_load(const std::string& path, int64_t seq_len, double validation_fraction) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const std::vector<std::string> files = text_files_in(path);
    std::string text;
    for (size_t i = 0; i < files.size(); ++i) {
      if (i > 0) text += '\n';
      text += fortune_separators_as_empty_lines(read_file(files[i]));
    }
    CharCorpus c = char_corpus_from_text(text, seq_len, validation_fraction, path);
    c.files = files;
    return c;
  }
  CharCorpus c = char_corpus_from_text(read_file(path), seq_len, validation_fraction, path);
  c.files = {path};
  return c;
}

HeldOutWindows char_heldout_windows(const std::vector<int32_t>& validation, int64_t window) {
  if (window < 1) throw std::invalid_argument("char_heldout_windows: window must be at least 1, got " + std::to_string(window));
  const size_t stride = size_t(window) + 1;
  const size_t windows = validation.size() / stride;
  if (windows < 2)
    throw std::invalid_argument("held-out text: the validation split has " + std::to_string(validation.size()) +
                                " characters, fewer than two windows of " + std::to_string(stride) +
                                " (one to calibrate on, one to evaluate); use a longer text or a shorter window");
  HeldOutWindows h;
  h.window = window;
  char_windows_deal(validation, window, h.evaluation, h.calibration);
  return h;
}

void char_windows_deal(const std::vector<int32_t>& text, int64_t window, std::vector<int32_t>& even,
                       std::vector<int32_t>& odd) {
  const size_t stride = size_t(window) + 1;
  for (size_t k = 0; k < text.size() / stride; ++k) {
    std::vector<int32_t>& part = k % 2 == 0 ? even : odd;
    const auto first = text.begin() + std::ptrdiff_t(k * stride);
    part.insert(part.end(), first, first + std::ptrdiff_t(stride));
  }
}

std::vector<int32_t> char_windows_spread(const std::vector<int32_t>& windows, int64_t window, int64_t n) {
  const size_t stride = size_t(window) + 1;
  const size_t have = windows.size() / stride;
  if (n <= 0 || size_t(n) >= have) return {windows.begin(), windows.begin() + std::ptrdiff_t(have * stride)};
  std::vector<int32_t> out;
  out.reserve(size_t(n) * stride);
  for (size_t i = 0; i < size_t(n); ++i) {
    const auto first = windows.begin() + std::ptrdiff_t(i * have / size_t(n) * stride);
    out.insert(out.end(), first, first + std::ptrdiff_t(stride));
  }
  return out;
}

}  // namespace qsync
