// File: tests/fuzz/kube_watch_event_fuzz.cpp
// Fuzzes what the operator reads from the API server: watch stream lines
// (operator/kube/kube_http.h: watch_event_from_line, split at newlines as KubeClient::watch
// does) and error bodies (kube_error_from_response; the first two input bytes are the HTTP code).
#include "operator/kube/kube_error.h"
#include "operator/kube/kube_http.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int code = (data[0] << 8 | data[1]) % 600;
  const std::string text = qsync::fuzz::as_string(data + 2, size - 2);
  static const qsync::kube::KubeConfig config = [] {
    qsync::kube::KubeConfig c;
    c.server = "http://127.0.0.1:1";
    c.source = "fuzz";
    return c;
  }();
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    qsync::fuzz::expect_clear_errors("watch_event_from_line", [&] {
      (void)qsync::kube::watch_event_from_line(line, config, "/api/v1/namespaces/default/pods");
    });
    start = end + 1;
  }
  qsync::fuzz::expect_clear_errors("kube_error_from_response", [&] {
    const qsync::kube::KubeError e = qsync::kube::kube_error_from_response(code, text, "get", "/api/v1/pods");
    (void)e.what();
  });
  return 0;
}
