// File: tests/worker/data/char_corpus_test.cpp
// Unit tests for worker/data/char_corpus.h: the 96-symbol vocabulary, encode/decode round trips,
// the train/validation split, held-out evaluation and calibration windows, folders of text files (name order, binary and *.u8 files skipped,
// fortune's "%" separators as empty lines) and the errors for empty, short and missing inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include "worker/data/char_corpus.h"

namespace qsync {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(CharVocabulary, PrintableAsciiNewlineAndTab) {
  EXPECT_EQ(CHAR_VOCAB_SIZE, 96);
  EXPECT_EQ(char_to_token(' '), 0);
  EXPECT_EQ(char_to_token('A'), 'A' - 32);
  EXPECT_EQ(char_to_token('~'), 94);
  EXPECT_EQ(char_to_token('\n'), 95);
  EXPECT_EQ(char_to_token('\t'), 0);
  EXPECT_EQ(char_to_token('\r'), -1);
  EXPECT_EQ(char_to_token(0), -1);
  EXPECT_EQ(char_to_token(127), -1);
  EXPECT_EQ(char_to_token(0xC3), -1);
  for (int t = 0; t < CHAR_VOCAB_SIZE; ++t) {
    EXPECT_EQ(char_to_token(static_cast<unsigned char>(token_to_char(t))), t) << "token " << t;
  }
  EXPECT_THROW(token_to_char(96), std::out_of_range);
  EXPECT_THROW(token_to_char(-1), std::out_of_range);
}

TEST(CharVocabulary, EncodeDropsOtherBytesAndDecodeRoundTrips) {
  const std::string text = "Hello,\tworld!\r\ncaf\xC3\xA9 ~\x7f\n";
  std::vector<int32_t> tokens = char_encode(text);
  EXPECT_EQ(char_decode(tokens), "Hello, world!\ncaf ~\n");
  const std::string printable = "The quick brown fox {jumps} over the lazy dog.\n0123456789 !\"#$%&'()*+,-./";
  EXPECT_EQ(char_decode(char_encode(printable)), printable);

  std::vector<float> as_float(tokens.begin(), tokens.end());
  EXPECT_EQ(char_decode(as_float.data(), int64_t(as_float.size())), "Hello, world!\ncaf ~\n");
  std::vector<float> bad = {1.0f, 2.5f};
  std::string e = error_of([&] { char_decode(bad.data(), 2); });
  EXPECT_NE(e.find("value 2.5"), std::string::npos) << e;
  EXPECT_NE(e.find("position 1"), std::string::npos) << e;
  std::vector<int32_t> out_of_range = {3, 96};
  EXPECT_THROW(char_decode(out_of_range), std::out_of_range);
}

TEST(CharCorpus, SplitHoldsOutTheEnd) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += char('a' + i % 26);
  CharCorpus c = char_corpus_from_text(text, 8, 0.25, "alphabet");
  ASSERT_EQ(c.train.size(), size_t(75));
  ASSERT_EQ(c.validation.size(), size_t(25));
  EXPECT_EQ(char_decode(c.train), text.substr(0, 75));
  EXPECT_EQ(char_decode(c.validation), text.substr(75));
  EXPECT_EQ(c.bytes_read, 100);
  EXPECT_EQ(c.bytes_dropped, 0);
  EXPECT_EQ(c.source, "alphabet");

  CharCorpus all = char_corpus_from_text(text, 8, 0.0);
  EXPECT_EQ(all.train.size(), size_t(100));
  EXPECT_TRUE(all.validation.empty());
}

TEST(CharCorpus, HeldOutWindowsAlternateOverTheWholeValidationSplit) {
  std::vector<int32_t> validation(5 * 9 + 3);  // 5 windows of 8 inputs + 1 target, 3 left over
  for (size_t i = 0; i < validation.size(); ++i) validation[i] = int32_t(i % 96);
  const HeldOutWindows h = char_heldout_windows(validation, 8);
  EXPECT_EQ(h.stride(), 9);
  const std::vector<int32_t> even = [&] {
    std::vector<int32_t> v;
    for (int k : {0, 2, 4}) v.insert(v.end(), validation.begin() + k * 9, validation.begin() + (k + 1) * 9);
    return v;
  }();
  const std::vector<int32_t> odd = [&] {
    std::vector<int32_t> v;
    for (int k : {1, 3}) v.insert(v.end(), validation.begin() + k * 9, validation.begin() + (k + 1) * 9);
    return v;
  }();
  EXPECT_EQ(h.evaluation, even);
  EXPECT_EQ(h.calibration, odd);  // the values are positions: no token is in both parts

  // Spread: n of the 3 evaluation windows, evenly spaced; 0 or too many: all of them.
  EXPECT_EQ(char_windows_spread(h.evaluation, 8, 0), h.evaluation);
  EXPECT_EQ(char_windows_spread(h.evaluation, 8, 7), h.evaluation);
  const std::vector<int32_t> two = char_windows_spread(h.evaluation, 8, 2);  // windows 0 and 1 (= 3 * 1 / 2)
  EXPECT_EQ(two, std::vector<int32_t>(h.evaluation.begin(), h.evaluation.begin() + 18));
  const std::vector<int32_t> one = char_windows_spread(h.calibration, 8, 1);
  EXPECT_EQ(one, std::vector<int32_t>(h.calibration.begin(), h.calibration.begin() + 9));

  const std::string e = error_of([&] { char_heldout_windows(std::vector<int32_t>(17), 8); });
  EXPECT_NE(e.find("fewer than two windows of 9"), std::string::npos) << e;
  EXPECT_NE(e.find("shorter window"), std::string::npos) << e;
}

TEST(CharCorpus, EmptyAndTooShortTextsGiveClearErrors) {
  std::string e = error_of([] { char_corpus_from_text("", 8, 0.1, "empty.txt"); });
  EXPECT_NE(e.find("empty.txt: the file is empty"), std::string::npos) << e;
  e = error_of([] { char_corpus_from_text("\r\x01\xff", 8, 0.1, "binary.bin"); });
  EXPECT_NE(e.find("no printable ASCII text"), std::string::npos) << e;
  e = error_of([] { char_corpus_from_text("short text", 16, 0.0, "short.txt"); });
  EXPECT_NE(e.find("the training part has 10 characters, fewer than one window of seq_len + 1 = 17"),
            std::string::npos) << e;
  EXPECT_NE(e.find("shorter seq_len"), std::string::npos) << e;
  e = error_of([] { char_corpus_from_text(std::string(40, 'x'), 8, 0.1, "small.txt"); });
  EXPECT_NE(e.find("the validation part has 4 characters"), std::string::npos) << e;
  EXPECT_THROW(char_corpus_from_text("abc", 0, 0.1), std::invalid_argument);
  EXPECT_THROW(char_corpus_from_text("abc", 1, 1.0), std::invalid_argument);
  EXPECT_THROW(char_corpus_from_text("abc", 1, -0.1), std::invalid_argument);
}

TEST(CharCorpus, LoadsFilesAndNamesMissingOnes) {
  const fs::path path = fs::temp_directory_path() / ("qsync_char_corpus_test_" + std::to_string(getpid()) + ".txt");
  std::string text;
  for (int i = 0; i < 50; ++i) text += "line " + std::to_string(i) + "\twith a tab\r\n";
  std::ofstream(path, std::ios::binary) << text;
  CharCorpus c = char_corpus_load(path.string(), 32, 0.1);
  EXPECT_EQ(c.source, path.string());
  EXPECT_EQ(c.bytes_dropped, 50);  // the '\r's
  std::string kept = char_decode(c.train) + char_decode(c.validation);
  EXPECT_EQ(kept.substr(0, 22), "line 0 with a tab\nline");
  fs::remove(path);

  std::string e = error_of([&] { char_corpus_load(path.string(), 32); });
  EXPECT_NE(e.find(path.string() + ": cannot open"), std::string::npos) << e;
  EXPECT_NE(e.find("--data"), std::string::npos) << e;
}

// A fresh folder under the temporary directory, removed with everything in it at the end.
class TempFolder {
 public:
  TempFolder() : path_(fs::temp_directory_path() / ("qsync_char_corpus_dir_" + std::to_string(getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempFolder() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path_ / name, std::ios::binary) << bytes;
  }

 private:
  fs::path path_;
};

TEST(CharCorpus, FolderReadsTextFilesInNameOrderWithFortuneSeparatorsAsEmptyLines) {
  TempFolder dir;
  // Written out of name order; "b" ends without a newline, "c" with one.
  dir.write("c", "Third file.\n");
  dir.write("a", "First quote.\n%\nSecond quote,\n  two lines.\n%\n");
  dir.write("b", "50% off\n%%\n %\nno newline at the end");
  std::string index(64, '\0');  // like fortune's a.dat: binary, skipped
  index += "text after the NUL";
  dir.write("a.dat", index);
  dir.write("a.u8", "the UTF-8 copy, skipped\n");
  fs::create_directories(dir.path() / "sub");  // subfolders are not read
  std::ofstream(dir.path() / "sub" / "d", std::ios::binary) << "in a subfolder\n";

  const std::string want =
      "First quote.\n\nSecond quote,\n  two lines.\n\n"  // a, each "%" line now empty
      "\n"                                                    // between a and b
      "50% off\n%%\n %\nno newline at the end"              // b: only exact "%" lines change
      "\n"                                                    // between b and c
      "Third file.\n";                                        // c
  CharCorpus c = char_corpus_load(dir.path().string(), 8, 0.0);
  EXPECT_EQ(char_decode(c.train), want);
  EXPECT_EQ(c.source, dir.path().string());
  ASSERT_EQ(c.files.size(), size_t(3));
  EXPECT_EQ(fs::path(c.files[0]).filename(), "a");
  EXPECT_EQ(fs::path(c.files[1]).filename(), "b");
  EXPECT_EQ(fs::path(c.files[2]).filename(), "c");
  EXPECT_EQ(c.bytes_read, int64_t(want.size()));
  EXPECT_EQ(c.bytes_dropped, 0);

  // The same mapping and split as the text itself; loading twice gives the same tokens.
  CharCorpus split = char_corpus_load(dir.path().string(), 8, 0.25);
  CharCorpus from_text = char_corpus_from_text(want, 8, 0.25);
  EXPECT_EQ(split.train, from_text.train);
  EXPECT_EQ(split.validation, from_text.validation);
  EXPECT_EQ(char_corpus_load(dir.path().string(), 8, 0.25).train, split.train);

  // A single file is read as it is: its "%" lines stay.
  CharCorpus one = char_corpus_load((dir.path() / "a").string(), 8, 0.0);
  EXPECT_EQ(char_decode(one.train), "First quote.\n%\nSecond quote,\n  two lines.\n%\n");
  ASSERT_EQ(one.files.size(), size_t(1));
}

TEST(CharCorpus, FolderWithoutTextFilesGivesAClearError) {
  TempFolder dir;
  std::string e = error_of([&] { char_corpus_load(dir.path().string(), 8); });
  EXPECT_NE(e.find(dir.path().string() + ": the folder holds no text file (0 binary or *.u8 files skipped"),
            std::string::npos) << e;
  dir.write("x.dat", std::string("\x01\x00\x02", 3));
  dir.write("x.u8", "utf-8 copy\n");
  e = error_of([&] { char_corpus_load(dir.path().string(), 8); });
  EXPECT_NE(e.find("(2 binary or *.u8 files skipped"), std::string::npos) << e;
  EXPECT_NE(e.find("--data"), std::string::npos) << e;
  dir.write("short", "tiny\n");  // a text file, but too short for one window
  e = error_of([&] { char_corpus_load(dir.path().string(), 8, 0.0); });
  EXPECT_NE(e.find("the training part has 5 characters"), std::string::npos) << e;
}

}  // namespace
}  // namespace qsync
