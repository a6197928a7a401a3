// File: worker/data/char_corpus.h
// A character-level corpus for language models: any text file becomes token ids over a fixed
// vocabulary of 96 symbols, split into training and validation parts.
//
// Vocabulary (CHAR_VOCAB_SIZE = 96, the `vocab: 96` of token model files):
//   ASCII 32..126 (' ' .. '~')  -> tokens 0..94  (token = byte - 32)
//   '\n'                        -> token 95
//   '\t'                        -> token 0 (a space)
//   every other byte ('\r', other control bytes, 127, all bytes of UTF-8 sequences) is dropped,
//   so the mapping is deterministic and the same file always gives the same tokens.
// Decoding is the inverse on tokens 0..95 (token 0 decodes to ' ').
//
// A folder is read as one text: its regular files (not subfolders) in name order, less binary
// files (a NUL byte in the first 4 KiB, e.g. fortune's .dat indexes) and files named *.u8, joined
// with a newline between files; in them a line that is exactly "%" (fortune(6)'s separator between
// quotations) becomes an empty line. A single file is read as it is.
//
// Split: the last `validation_fraction` of the tokens (rounded down) is held out for validation,
// the rest (the beginning of the file) is for training; no token is in both.
//
//   CharCorpus c = char_corpus_load("corpus.txt", /*seq_len=*/64, /*validation_fraction=*/0.1);
//   c.train.size() + c.validation.size() == number of kept characters
//   char_decode(c.train.data(), 20) -> the first 20 kept characters of the file
//   char_corpus_load("/usr/share/games/fortunes", 64)  -> every quotation file of the fortunes package
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qsync {

inline constexpr int64_t CHAR_VOCAB_SIZE = 96;
inline constexpr int32_t CHAR_NEWLINE_TOKEN = 95;

// The token of byte `c`, or -1 when the byte is dropped.
int32_t char_to_token(unsigned char c);
// The character of token `t` in 0..95; throws std::out_of_range otherwise.
char token_to_char(int32_t t);

// Text -> tokens with the mapping above.
std::vector<int32_t> char_encode(std::string_view text);
// Tokens -> text; throws std::out_of_range naming the position of a token outside 0..95.
std::string char_decode(const int32_t* tokens, int64_t n);
std::string char_decode(const std::vector<int32_t>& tokens);
// Float token ids (the engine's (B, T) input convention, e.g. a sampled sequence): each value must
// be an integer in 0..95.
std::string char_decode(const float* tokens, int64_t n);

struct CharCorpus {
  std::string source;               // the file (or name) it came from, for messages
  std::vector<std::string> files;   // the files read, in order (one, or a folder's text files)
  int64_t bytes_read = 0;           // size of the text before mapping
  int64_t bytes_dropped = 0;        // bytes that map to no token
  std::vector<int32_t> train;       // (N_train) token ids 0..95
  std::vector<int32_t> validation;  // (N_val)
};

// Builds a corpus from text. Each non-empty part must hold at least seq_len + 1 tokens (one
// window: T inputs and T shifted targets); validation_fraction in [0, 1), 0 means no validation
// part. Throws std::runtime_error naming `source`, the sizes and the fix when the text is empty
// or too short.
CharCorpus char_corpus_from_text(std::string_view text, int64_t seq_len, double validation_fraction,
                                 const std::string& source = "<text>");

// Reads `path` (a text file, or a folder of them as above) and builds a corpus as above; a missing
// or unreadable file, or a folder without text files, throws with the path.
CharCorpus char_corpus_load(const std::string& path, int64_t seq_len, double validation_fraction = 0.1);

// Held-out text for a model that is adapted after training (SPD calibration) and then judged: the
// validation split cut into windows of `window` inputs and their next token (window + 1 tokens; no
// token in two windows), dealt alternately, even windows to `evaluation` and odd ones to
// `calibration`. Both parts sample the whole split (a folder such as the fortunes ends with several
// files of different styles, so halves would differ in kind) and no token is in both. A part is
// its windows concatenated, window k at k * (window + 1): score it with that stride.
//   HeldOutWindows h = char_heldout_windows(corpus.validation, 128);
//   tp_evaluate(model, h.evaluation, 128, 400, 8, h.stride())
struct HeldOutWindows {
  int64_t window = 0;                // inputs per window
  std::vector<int32_t> evaluation;   // (n_eval * (window + 1))
  std::vector<int32_t> calibration;  // (n_cal * (window + 1))
  int64_t stride() const { return window + 1; }
};
// Throws std::invalid_argument when `validation` holds fewer than two windows (naming the fix).
HeldOutWindows char_heldout_windows(const std::vector<int32_t>& validation, int64_t window);

// The dealing above for any text: its windows of (window + 1) tokens, even ones appended to
// `even`, odd ones to `odd` (a partial window at the end is left out).
void char_windows_deal(const std::vector<int32_t>& text, int64_t window, std::vector<int32_t>& even,
                       std::vector<int32_t>& odd);

// `n` windows of (window + 1) tokens, evenly spaced over `windows` (a part as above: its windows
// concatenated), concatenated in order; all of them when n is 0 or not less than it holds.
std::vector<int32_t> char_windows_spread(const std::vector<int32_t>& windows, int64_t window, int64_t n);

}  // namespace qsync
