// File: tests/fuzz/fuzz_support.h
// What every fuzz target shares: the rule for what a reader may throw, and temp files for
// readers that take a path. A reader's documented errors (std::invalid_argument and
// std::runtime_error, yaml-cpp's included) are fine when their message says something; any
// other exception escaping (nlohmann::json's type errors, std::out_of_range from std::stoi,
// std::length_error, std::bad_alloc) is an unclear error and counts as a finding: the target
// aborts so libFuzzer keeps the input. Crashes and sanitizer reports are findings as well.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <typeinfo>

namespace qsync::fuzz {

// A message that only names the std:: function that failed ("stoi", "stod") says nothing.
inline void require_clear_message(const char* reader, const char* message) {
  static const char* const bare[] = {"stoi", "stol", "stoll", "stoul", "stoull", "stof", "stod", "stold", "", nullptr};
  for (const char* const* b = bare; *b != nullptr; ++b) {
    if (std::strcmp(message, *b) == 0) {
      std::fprintf(stderr, "%s: error without a cause: '%s'\n", reader, message);
      std::abort();
    }
  }
}

// Runs `fn` under the rule above.
template <class Fn>
void expect_clear_errors(const char* reader, Fn&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    require_clear_message(reader, e.what());
  } catch (const std::runtime_error& e) {
    require_clear_message(reader, e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: unclear error escaped (%s): %s\n", reader, typeid(e).name(), e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "%s: a non-std exception escaped\n", reader);
    std::abort();
  }
}

inline std::string as_string(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// One file under $TMPDIR (or /tmp) for the whole run, rewritten for every input.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& name) {
    const char* tmp = std::getenv("TMPDIR");
    path_ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/qsync_fuzz_" +
            std::to_string(::getpid()) + "_" + name;
  }
  ~ScratchFile() { std::remove(path_.c_str()); }
  const std::string& write(const uint8_t* data, size_t size) {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr) {
      std::perror(path_.c_str());
      std::abort();
    }
    if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace qsync::fuzz
