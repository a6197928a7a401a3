// File: tests/kube_api_server/label_selector.cpp
// A lexer and recursive-descent parser for label selectors, following the grammar of
// k8s.io/apimachinery/pkg/labels/selector.go, and a term-by-term matcher for field selectors
// (k8s.io/apimachinery/pkg/fields/selector.go: `\,` `\=` `\\` escape those characters in
// values).
#include "tests/kube_api_server/label_selector.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <stdexcept>

namespace qsync::kube_test {
namespace {

// ---- label selector lexer ----

enum class TokenKind { kIdentifier, kComma, kEquals, kDoubleEquals, kNotEquals, kNot, kOpenParen,
                       kCloseParen, kIn, kNotIn, kGreaterThan, kLessThan, kEnd };

struct Token {
  TokenKind kind;
  std::string text;
};

bool is_special(char c) {
  return c == '!' || c == '=' || c == '(' || c == ')' || c == ',' || c == '<' || c == '>';
}

std::vector<Token> lex(const std::string& s) {
  std::vector<Token> tokens;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    const char next = i + 1 < s.size() ? s[i + 1] : '\0';
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == '!' && next == '=') {
      tokens.push_back({TokenKind::kNotEquals, "!="}), i += 2;
    } else if (c == '=' && next == '=') {
      tokens.push_back({TokenKind::kDoubleEquals, "=="}), i += 2;
    } else if (is_special(c)) {
      static const std::string kSingles = "!=(),<>";
      static const std::array<TokenKind, 7> kKinds = {TokenKind::kNot, TokenKind::kEquals, TokenKind::kOpenParen,
          TokenKind::kCloseParen, TokenKind::kComma, TokenKind::kLessThan, TokenKind::kGreaterThan};
      tokens.push_back({kKinds[kSingles.find(c)], std::string(1, c)}), ++i;
    } else {
      size_t end = i;
      while (end < s.size() && !std::isspace(static_cast<unsigned char>(s[end])) && !is_special(s[end])) ++end;
      std::string text = s.substr(i, end - i);
      const TokenKind kind = text == "in" ? TokenKind::kIn : text == "notin" ? TokenKind::kNotIn : TokenKind::kIdentifier;
      tokens.push_back({kind, std::move(text)});
      i = end;
    }
  }
  tokens.push_back({TokenKind::kEnd, ""});
  return tokens;
}

// ---- name rules (k8s.io/apimachinery/pkg/util/validation) ----

bool is_alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, at most 63 characters.
bool is_label_name(const std::string& n) {
  if (n.empty() || n.size() > 63 || !is_alnum(n.front()) || !is_alnum(n.back())) return false;
  return std::all_of(n.begin(), n.end(), [](char c) { return is_alnum(c) || c == '-' || c == '_' || c == '.'; });
}

// Lower-case DNS subdomain: dot-separated [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 253 characters.
bool is_dns_subdomain(const std::string& p) {
  if (p.empty() || p.size() > 253) return false;
  size_t start = 0;
  while (start <= p.size()) {
    size_t dot = p.find('.', start);
    if (dot == std::string::npos) dot = p.size();
    const std::string part = p.substr(start, dot - start);
    auto lower_alnum = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'z'); };
    if (part.empty() || !lower_alnum(part.front()) || !lower_alnum(part.back())) return false;
    if (!std::all_of(part.begin(), part.end(), [&](char c) { return lower_alnum(c) || c == '-'; })) return false;
    start = dot + 1;
  }
  return true;
}

// "" when `key` is a valid label key ([prefix/]name), otherwise what is wrong with it.
std::string label_key_problem(const std::string& key) {
  const size_t slash = key.find('/');
  if (slash != std::string::npos) {
    if (!is_dns_subdomain(key.substr(0, slash))) return "prefix of key \"" + key + "\" must be a lower-case DNS subdomain";
    if (!is_label_name(key.substr(slash + 1)))
      return "name part of key \"" + key + "\" must be 1-63 alphanumeric characters, '-', '_' or '.', starting and ending alphanumeric";
    return "";
  }
  if (!is_label_name(key)) return "key \"" + key + "\" must be 1-63 alphanumeric characters, '-', '_' or '.', starting and ending alphanumeric";
  return "";
}

bool parse_int64(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  size_t used = 0;
  try {
    out = std::stoll(s, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == s.size();
}

// ---- field selector helpers ----

std::vector<std::string> split_unescaped(const std::string& s, char sep) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      parts.back() += s.substr(i, 2), ++i;
    } else if (s[i] == sep) {
      parts.emplace_back();
    } else {
      parts.back() += s[i];
    }
  }
  return parts;
}

std::string unescape_field_value(const std::string& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == '\\' && i + 1 < v.size()) ++i;
    out += v[i];
  }
  return out;
}

bool field_supported(const std::string& field) {
  static const std::array<const char*, 4> kFields = {"metadata.name", "metadata.namespace", "status.phase", "spec.nodeName"};
  static const std::array<const char*, 7> kInvolved = {"kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"};
  for (const char* f : kFields) if (field == f) return true;
  for (const char* f : kInvolved) if (field == std::string("involvedObject.") + f) return true;
  return field == "reason" || field == "type";
}

// The field's value as the API server's field index holds it: a string, "" when absent.
std::string field_value(const json& object, const std::string& field) {
  const json* at = &object;
  size_t start = 0;
  while (start <= field.size()) {
    size_t dot = field.find('.', start);
    if (dot == std::string::npos) dot = field.size();
    const std::string name = field.substr(start, dot - start);
    if (!at->is_object() || !at->contains(name)) return "";
    at = &(*at)[name];
    start = dot + 1;
  }
  if (at->is_string()) return at->get<std::string>();
  return at->is_null() ? "" : at->dump();
}

}  // namespace

LabelSelector LabelSelector::parse(const std::string& s) {
  const std::vector<Token> tokens = lex(s);
  size_t pos = 0;
  auto fail = [&](const std::string& why) -> void {
    throw std::invalid_argument("invalid label selector \"" + s + "\": " + why);
  };
  auto found = [&](const std::string& expected) {
    const Token& t = tokens[pos];
    fail("found '" + (t.kind == TokenKind::kEnd ? std::string("end of string") : t.text) + "', expected: " + expected);
  };
  auto check_value = [&](const std::string& v) {
    if (!v.empty() && !is_label_name(v))
      fail("value \"" + v + "\" must be empty or 1-63 alphanumeric characters, '-', '_' or '.', starting and ending alphanumeric");
  };
  LabelSelector selector;
  if (tokens[0].kind == TokenKind::kEnd) return selector;
  while (true) {
    Requirement r;
    if (tokens[pos].kind == TokenKind::kNot) {
      r.op = Operator::kDoesNotExist;
      ++pos;
    }
    if (tokens[pos].kind != TokenKind::kIdentifier) found("identifier");
    r.key = tokens[pos++].text;
    if (std::string why = label_key_problem(r.key); !why.empty()) fail(why);
    const TokenKind op = tokens[pos].kind;
    if (r.op == Operator::kDoesNotExist) {
      // `!key` takes no operator or values.
    } else if (op == TokenKind::kComma || op == TokenKind::kEnd) {
      r.op = Operator::kExists;
    } else if (op == TokenKind::kEquals || op == TokenKind::kDoubleEquals || op == TokenKind::kNotEquals) {
      r.op = op == TokenKind::kNotEquals ? Operator::kNotEquals : Operator::kEquals;
      ++pos;
      std::string value;  // `a=` selects the empty value
      if (tokens[pos].kind == TokenKind::kIdentifier || tokens[pos].kind == TokenKind::kIn || tokens[pos].kind == TokenKind::kNotIn)
        value = tokens[pos++].text;
      else if (tokens[pos].kind != TokenKind::kComma && tokens[pos].kind != TokenKind::kEnd)
        found("value, ',' or end of string");
      check_value(value);
      r.values.push_back(value);
    } else if (op == TokenKind::kGreaterThan || op == TokenKind::kLessThan) {
      r.op = op == TokenKind::kGreaterThan ? Operator::kGreaterThan : Operator::kLessThan;
      ++pos;
      int64_t unused = 0;
      if (tokens[pos].kind != TokenKind::kIdentifier || !parse_int64(tokens[pos].text, unused))
        found("an integer after '" + std::string(op == TokenKind::kGreaterThan ? ">" : "<") + "'");
      r.values.push_back(tokens[pos++].text);
    } else if (op == TokenKind::kIn || op == TokenKind::kNotIn) {
      r.op = op == TokenKind::kIn ? Operator::kIn : Operator::kNotIn;
      ++pos;
      if (tokens[pos].kind != TokenKind::kOpenParen) found("'(' after '" + tokens[pos - 1].text + "'");
      if (tokens[++pos].kind == TokenKind::kCloseParen) fail("the value set of \"" + r.key + "\" can't be empty for 'in' and 'notin'");
      while (true) {
        std::string value;
        if (tokens[pos].kind == TokenKind::kIdentifier) value = tokens[pos++].text;
        check_value(value);
        r.values.push_back(value);
        if (tokens[pos].kind == TokenKind::kCloseParen) break;
        if (tokens[pos].kind != TokenKind::kComma) found("',' or ')' in the value set of \"" + r.key + "\"");
        ++pos;
      }
      ++pos;
    } else {
      found("'=', '==', '!=', 'in', 'notin', '>', '<', ',' or end of string");
    }
    selector.requirements_.push_back(std::move(r));
    if (tokens[pos].kind == TokenKind::kEnd) break;
    if (tokens[pos].kind != TokenKind::kComma) found("',' or end of string");
    ++pos;
  }
  return selector;
}

bool LabelSelector::requirement_matches(const Requirement& r, const json& labels) const {
  const bool has = labels.is_object() && labels.contains(r.key);
  std::string value;
  if (has) value = labels[r.key].is_string() ? labels[r.key].get<std::string>() : labels[r.key].dump();
  const bool listed = std::find(r.values.begin(), r.values.end(), value) != r.values.end();
  switch (r.op) {
    case Operator::kEquals:
    case Operator::kIn: return has && listed;
    case Operator::kNotEquals:
    case Operator::kNotIn: return !has || !listed;
    case Operator::kExists: return has;
    case Operator::kDoesNotExist: return !has;
    case Operator::kGreaterThan:
    case Operator::kLessThan: {
      int64_t have = 0, bound = 0;
      if (!has || !parse_int64(value, have) || !parse_int64(r.values[0], bound)) return false;
      return r.op == Operator::kGreaterThan ? have > bound : have < bound;
    }
  }
  return false;
}

bool LabelSelector::matches(const json& labels) const {
  return std::all_of(requirements_.begin(), requirements_.end(),
                     [&](const Requirement& r) { return requirement_matches(r, labels); });
}

bool field_selector_matches(const std::string& selector, const json& object) {
  if (selector.find_first_not_of(" \t") == std::string::npos) return true;
  bool all = true;
  for (const std::string& term : split_unescaped(selector, ',')) {
    size_t at = std::string::npos, op_len = 0;
    bool negate = false;
    for (const char* op : {"!=", "==", "="}) {
      const size_t p = term.find(op);
      if (p != std::string::npos && (at == std::string::npos || p < at)) at = p, op_len = std::string(op).size(), negate = op[0] == '!';
    }
    if (at == std::string::npos || at == 0)
      throw std::invalid_argument("invalid field selector \"" + selector + "\": term \"" + term +
                                  "\" must be field=value, field==value or field!=value");
    std::string field = term.substr(0, at);
    field.erase(0, field.find_first_not_of(' '));
    field.erase(field.find_last_not_of(' ') + 1);
    if (!field_supported(field)) throw std::invalid_argument("field label not supported: " + field);
    const bool equal = field_value(object, field) == unescape_field_value(term.substr(at + op_len));
    all = all && (negate ? !equal : equal);
  }
  return all;
}

}  // namespace qsync::kube_test
