// File: operator/http/http_message.cpp
// Reading HTTP/1.1 requests off a socket and the small pieces of the wire format the server
// shares: reason phrases, full sends, URL coding, request accessors.
#include "operator/http/http_message.h"

#include <sys/socket.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace qsync::http {
namespace {

constexpr size_t kMaxHeaderBytes = 64 * 1024;
constexpr size_t kMaxBodyBytes = 64 * 1024 * 1024;

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

void parse_query(const std::string& query, std::map<std::string, std::string>& out) {
  size_t start = 0;
  while (start <= query.size()) {
    size_t amp = query.find('&', start);
    if (amp == std::string::npos) amp = query.size();
    std::string part = query.substr(start, amp - start);
    if (!part.empty()) {
      size_t eq = part.find('=');
      std::string key = url_decode(part.substr(0, eq), true);
      std::string value = eq == std::string::npos ? "" : url_decode(part.substr(eq + 1), true);
      out[key] = value;
    }
    start = amp + 1;
  }
}

}  // namespace

std::string lower_case(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
  }
}

bool send_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Buffered reads from one socket.

bool SocketReader::read_until(const std::string& delimiter, size_t limit, std::string& out) {
  for (;;) {
    size_t at = buffer_.find(delimiter);
    if (at != std::string::npos) {
      out = buffer_.substr(0, at);
      buffer_.erase(0, at + delimiter.size());
      return true;
    }
    if (buffer_.size() > limit || !fill()) return false;
  }
}

bool SocketReader::read_exact(size_t n, std::string& out) {
  while (buffer_.size() < n) {
    if (!fill()) return false;
  }
  out.append(buffer_, 0, n);
  buffer_.erase(0, n);
  return true;
}

bool SocketReader::fill() {
  char chunk[16384];
  for (;;) {
    ssize_t got = ::recv(fd_, chunk, sizeof chunk, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(got));
    return true;
  }
}

int read_http_request(SocketReader& reader, HttpRequest& req, bool& keep_alive) {
  std::string head;
  if (!reader.read_until("\r\n\r\n", kMaxHeaderBytes, head)) return -1;
  size_t line_end = head.find("\r\n");
  std::string request_line = head.substr(0, line_end);
  size_t sp1 = request_line.find(' ');
  size_t sp2 = request_line.rfind(' ');
  if (sp1 == std::string::npos || sp2 == sp1) {
    return 400;
  }
  req.method = request_line.substr(0, sp1);
  req.raw_target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string version = request_line.substr(sp2 + 1);
  size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
  while (pos < head.size()) {
    size_t end = head.find("\r\n", pos);
    if (end == std::string::npos) end = head.size();
    std::string line = head.substr(pos, end - pos);
    size_t colon = line.find(':');
    if (colon != std::string::npos) req.headers[lower_case(trim(line.substr(0, colon)))] = trim(line.substr(colon + 1));
    pos = end + 2;
  }
  size_t qmark = req.raw_target.find('?');
  req.path = url_decode(req.raw_target.substr(0, qmark), false);
  if (qmark != std::string::npos) parse_query(req.raw_target.substr(qmark + 1), req.query);
  std::string connection = lower_case(req.header("connection"));
  keep_alive = version == "HTTP/1.0" ? connection == "keep-alive" : connection != "close";

  if (lower_case(req.header("transfer-encoding")).find("chunked") != std::string::npos) {
    for (;;) {
      std::string size_line;
      if (!reader.read_until("\r\n", 1024, size_line)) return -1;
      size_t size = std::strtoul(size_line.c_str(), nullptr, 16);
      if (size == 0) {
        std::string trailer;
        do {
          if (!reader.read_until("\r\n", kMaxHeaderBytes, trailer)) return -1;
        } while (!trailer.empty());
        break;
      }
      if (req.body.size() + size > kMaxBodyBytes) {
        return 413;
      }
      std::string crlf;
      if (!reader.read_exact(size, req.body) || !reader.read_exact(2, crlf)) return -1;
    }
  } else if (auto length = req.header("content-length"); !length.empty()) {
    size_t n = std::strtoul(length.c_str(), nullptr, 10);
    if (n > kMaxBodyBytes) {
      return 413;
    }
    if (!reader.read_exact(n, req.body)) return -1;
  }
  return 0;
}

std::string HttpRequest::header(const std::string& lower_name, const std::string& fallback) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? fallback : it->second;
}

std::string HttpRequest::param(const std::string& name, const std::string& fallback) const {
  auto it = query.find(name);
  return it == query.end() ? fallback : it->second;
}

std::string url_decode(const std::string& s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

}  // namespace qsync::http
