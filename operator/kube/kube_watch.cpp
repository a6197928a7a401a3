// File: operator/kube/kube_watch.cpp
// KubeClient::watch: one GET ?watch=1 whose chunked body is a stream of JSON lines
// ({type, object}). The body is read as it arrives from a producer/consumer buffer; every wait
// is bounded so that `stop` is seen within ~100 ms, after which the request is cancelled (the
// connection closes). Objects and BOOKMARKs move the returned resourceVersion; a 410 answer or
// an ERROR event throws KubeError.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>

#include <cpprest/producerconsumerstream.h>

#include "operator/kube/kube_client.h"
#include "operator/kube/kube_http.h"

namespace qsync::kube {
namespace {

using Traits = concurrency::streams::producer_consumer_buffer<uint8_t>::traits;
constexpr auto kStopCheckPeriod = std::chrono::milliseconds(100);

// Set once by a task continuation; waited on with a timeout.
class CompletionSignal {
 public:
  void fire() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      fired_ = true;
    }
    cv_.notify_all();
  }
  bool wait_for(std::chrono::milliseconds period) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, period, [this] { return fired_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool fired_ = false;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool stop_requested(const std::atomic<bool>* stop) { return stop != nullptr && stop->load(); }

// Waits for `task`, returning false (without waiting further) once `stop` becomes true.
template <typename T>
bool wait_unless_stopped(const pplx::task<T>& task, const std::atomic<bool>* stop) {
  if (task.is_done()) return true;
  auto signal = std::make_shared<CompletionSignal>();
  task.then([signal](pplx::task<T> done) {
    // Observe a failure here: pplx aborts the process when a task's exception goes unobserved,
    // and a task abandoned at `stop` has no other reader.
    try {
      done.wait();
    } catch (...) {
    }
    signal->fire();
  });
  while (!signal->wait_for(kStopCheckPeriod)) {
    if (stop_requested(stop)) return false;
  }
  return true;
}

// How the body's download ended, when it failed (set from a pplx continuation).
struct StreamFailure {
  std::mutex mu;
  std::string message;
};

// Closes the buffer's write side so that pending reads see the end of the data; the close's own
// outcome is observed (and dropped) for the same reason as in wait_unless_stopped.
void close_write_side(concurrency::streams::producer_consumer_buffer<uint8_t> body) {
  body.close(std::ios_base::out).then([](pplx::task<void> closed) {
    try {
      closed.wait();
    } catch (...) {
    }
  });
}

std::string resource_version_of(const json& object) {
  if (!object.is_object() || !object.contains("metadata") || !object["metadata"].is_object()) return "";
  const json& metadata = object["metadata"];
  if (!metadata.contains("resourceVersion") || !metadata["resourceVersion"].is_string()) return "";
  return metadata["resourceVersion"].get<std::string>();
}

}  // namespace

std::optional<WatchEvent> watch_event_from_line(const std::string& line, const KubeConfig& config,
                                                const std::string& path) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return std::nullopt;
  json event = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!event.is_object() || !event.contains("type") || !event["type"].is_string()) {
    throw transport_error("malformed watch event: " + line.substr(0, 200), config, "watch", path);
  }
  WatchEvent parsed{event["type"].get<std::string>(), event.contains("object") ? event["object"] : json::object()};
  if (parsed.type == "ERROR") {
    // A code of another type (or an object that is not a Status) is the generic 500, not a type_error.
    const json& status = parsed.object;
    const int status_code = status.is_object() && status.contains("code") && status["code"].is_number_integer()
                                ? status["code"].get<int>() : 500;
    throw kube_error_from_response(status_code, parsed.object.dump(), "watch", path);
  }
  return parsed;
}

std::string KubeClient::watch(const ResourceType& type, const std::string& ns, const WatchOptions& options,
                              const std::function<bool(const WatchEvent&)>& on_event, const std::atomic<bool>* stop) {
  std::string last_version = options.resource_version;
  if (stop_requested(stop)) return last_version;

  std::string path = type.path(ns);
  QueryString query;
  query.add("watch", "1").add("resourceVersion", options.resource_version);
  if (options.allow_bookmarks) query.add("allowWatchBookmarks", "true");
  if (options.timeout_seconds > 0) query.add("timeoutSeconds", std::to_string(options.timeout_seconds));
  query.add("labelSelector", options.label_selector).add("fieldSelector", options.field_selector);

  impl_->bucket.wait();
  // The inactivity timeout is reset by every chunk; the server ends the stream after
  // timeout_seconds, so allow a minute beyond that (an hour without a server timeout).
  double idle_timeout = options.timeout_seconds > 0 ? options.timeout_seconds + 60.0 : 3600.0;
  web::http::client::http_client client(config_.server, http_client_settings(config_, idle_timeout));
  web::http::http_request request = make_http_request("GET", path + query.str(), config_, options_);
  concurrency::streams::producer_consumer_buffer<uint8_t> body;
  request.set_response_stream(body.create_ostream());
  pplx::cancellation_token_source cancel;

  auto start = std::chrono::steady_clock::now();
  pplx::task<web::http::http_response> response_task = client.request(request, cancel.get_token());
  // However the watch ends (stop, on_event's false, an exception), the request is cancelled: the
  // connection closes and a pending read of the body sees its end.
  struct EndRequest {
    pplx::cancellation_token_source& cancel;
    concurrency::streams::producer_consumer_buffer<uint8_t>& body;
    ~EndRequest() {
      cancel.cancel();
      close_write_side(body);
    }
  } end_request{cancel, body};
  if (!wait_unless_stopped(response_task, stop)) return last_version;
  web::http::http_response response;
  try {
    response = response_task.get();
  } catch (const std::exception& e) {
    if (options_.observer) options_.observer("watch", 0, seconds_since(start));
    throw transport_error(e.what(), config_, "watch", path);
  }
  int code = response.status_code();
  if (options_.observer) options_.observer("watch", code, seconds_since(start));

  // When cpprestsdk has written the whole body (or failed), close the buffer's write side so a
  // pending read ends instead of waiting for more.
  auto failure = std::make_shared<StreamFailure>();
  response.content_ready().then([body, failure](pplx::task<web::http::http_response> done) {
    try {
      done.wait();
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(failure->mu);
      failure->message = e.what();
    }
    close_write_side(body);
  });

  bool success = code >= 200 && code < 300;
  std::string pending;      // bytes after the last complete line
  std::string error_body;   // the whole body of a failed answer
  std::vector<uint8_t> scratch(64 * 1024);

  // Handles one complete line: returns false when the watch should end.
  auto handle_line = [&](const std::string& line) -> bool {
    const std::optional<WatchEvent> parsed = watch_event_from_line(line, config_, path);
    if (!parsed) return true;
    std::string version = resource_version_of(parsed->object);
    if (!version.empty()) last_version = version;
    return on_event(*parsed);
  };

  while (true) {
    auto next = body.bumpc();  // bumpc advances; getc only peeks
    if (!wait_unless_stopped(next, stop)) return last_version;
    Traits::int_type first = 0;
    try {
      first = next.get();
    } catch (const std::exception& e) {
      throw transport_error(std::string("watch stream failed: ") + e.what(), config_, "watch", path);
    }
    if (first == Traits::eof()) break;
    std::string arrived(1, static_cast<char>(first));
    size_t available = body.in_avail();
    while (available > 0) {
      // `available` bytes are buffered already, so this read completes at once.
      size_t n = body.getn(scratch.data(), std::min(available, scratch.size())).get();
      if (n == 0) break;
      arrived.append(reinterpret_cast<const char*>(scratch.data()), n);
      available = body.in_avail();
    }
    if (!success) {
      error_body += arrived;
      continue;
    }
    pending += arrived;
    size_t line_start = 0;
    for (size_t newline = pending.find('\n'); newline != std::string::npos; newline = pending.find('\n', line_start)) {
      bool keep_going = handle_line(pending.substr(line_start, newline - line_start));
      line_start = newline + 1;
      if (!keep_going || stop_requested(stop)) return last_version;
    }
    pending.erase(0, line_start);
  }

  if (!success) throw kube_error_from_response(code, error_body, "watch", path);
  {
    std::lock_guard<std::mutex> lock(failure->mu);
    if (!failure->message.empty() && !stop_requested(stop)) {
      throw transport_error("watch stream broke: " + failure->message, config_, "watch", path);
    }
  }
  if (!pending.empty()) handle_line(pending);  // a last event without its newline
  return last_version;
}

}  // namespace qsync::kube
