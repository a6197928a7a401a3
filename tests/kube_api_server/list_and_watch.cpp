// File: tests/kube_api_server/list_and_watch.cpp
// List and watch over the object store. A watch holds the lock only while it reads events
// from the log; it writes to the socket unlocked and waits on ApiState::changed in short slices
// so it notices a departed client, its timeout, a bookmark being due and close_watches().
#include "tests/kube_api_server/list_and_watch.h"

#include <chrono>
#include <stdexcept>

#include "tests/kube_api_server/api_error.h"
#include "tests/kube_api_server/label_selector.h"
#include "tests/kube_api_server/object_writes.h"
#include "tests/kube_api_server/table.h"

namespace qsync::kube_test {
namespace {

using nlohmann::json;
using qsync::http::HandlerResult;
using qsync::http::HttpRequest;
using qsync::http::HttpResponse;
using qsync::http::ResponseStream;

// Selects the objects a list or watch shows.
struct ObjectFilter {
  std::string ns;
  LabelSelector labels;
  std::string fields;

  bool matches(const json& object) const {
    const json& meta = object["metadata"];
    if (!ns.empty() && meta.value("namespace", "") != ns) return false;
    if (!labels.empty() && !labels.matches(meta.contains("labels") ? meta["labels"] : json(nullptr))) return false;
    return fields.empty() || field_selector_matches(fields, object);
  }
};

ObjectFilter filter_for(const HttpRequest& req, const ResourcePath& p) {
  ObjectFilter f;
  f.ns = p.ns;
  f.fields = req.param("fieldSelector");
  try {
    f.labels = LabelSelector::parse(req.param("labelSelector"));
    if (!f.fields.empty()) field_selector_matches(f.fields, json{{"metadata", json::object()}});
  } catch (const std::invalid_argument& e) {
    throw bad_request_error(std::string("invalid selector: ") + e.what());
  }
  return f;
}

std::string hex_encode(const std::string& s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(hex[c >> 4]);
    out.push_back(hex[c & 15]);
  }
  return out;
}

std::string hex_decode(const std::string& s) {
  if (s.size() % 2 != 0) throw bad_request_error("continue: Invalid value: \"" + s + "\": not a token this server issued");
  std::string out;
  for (size_t i = 0; i < s.size(); i += 2) {
    try {
      out.push_back(static_cast<char>(std::stoi(s.substr(i, 2), nullptr, 16)));
    } catch (const std::exception&) {
      throw bad_request_error("continue: Invalid value: \"" + s + "\": not a token this server issued");
    }
  }
  return out;
}

std::string object_id(const json& object) {
  return object["metadata"].value("namespace", "") + "/" + object["metadata"].value("name", "");
}

json printer_columns_for(const ApiResource& r, const std::string& version) {
  auto it = r.printer_columns.find(version);
  return it == r.printer_columns.end() || it->second.is_null() ? json::array() : it->second;
}

std::string watch_line(const std::string& type, const json& object) {
  return json{{"type", type}, {"object", object}}.dump() + "\n";
}

}  // namespace

bool wants_table(const HttpRequest& req) {
  std::string accept = req.header("accept");
  return accept.find("as=Table") != std::string::npos && accept.find("g=meta.k8s.io") != std::string::npos;
}

HttpResponse object_response(const ApiResource& r, const ResourcePath& p, const HttpRequest& req, const json& object,
                             int status) {
  HttpResponse res;
  res.status = status;
  res.headers["Content-Type"] = "application/json";
  json served = served_object(r, object, p.version);
  if (wants_table(req) && req.method == "GET") {
    try {
      json table = table_for({served}, printer_columns_for(r, p.version), req.param("includeObject", "Metadata"));
      table["metadata"] = {{"resourceVersion", object["metadata"].value("resourceVersion", "")}};
      res.body = table.dump();
      return res;
    } catch (const std::invalid_argument& e) {
      throw bad_request_error(e.what());
    }
  }
  res.body = served.dump();
  return res;
}

HttpResponse list_objects(ApiState& s, const ApiResource& r, const ResourcePath& p, const HttpRequest& req) {
  ObjectFilter filter = filter_for(req, p);
  std::string after = req.param("continue").empty() ? "" : hex_decode(req.param("continue"));
  long limit = 0;
  try {
    limit = req.param("limit").empty() ? 0 : std::stol(req.param("limit"));
  } catch (const std::exception&) {
    throw bad_request_error("limit: Invalid value: \"" + req.param("limit") + "\": must be an integer");
  }
  std::vector<json> items;
  std::string next_token;
  size_t remaining = 0;
  for (const json* stored : s.store.list_refs(r.key(), p.ns)) {  // copies only the page
    const json& object = *stored;
    if (!after.empty() && object_id(object) <= after) continue;
    if (!filter.matches(object)) continue;
    if (limit > 0 && static_cast<long>(items.size()) == limit) {
      ++remaining;
      continue;
    }
    items.push_back(served_object(r, object, p.version));
  }
  json list_meta = {{"resourceVersion", std::to_string(s.store.current_resource_version())}};
  if (remaining > 0) {
    list_meta["continue"] = hex_encode(object_id(items.back()));
    list_meta["remainingItemCount"] = remaining;
  }
  HttpResponse res;
  res.headers["Content-Type"] = "application/json";
  if (wants_table(req)) {
    try {
      json table = table_for(items, printer_columns_for(r, p.version), req.param("includeObject", "Metadata"));
      table["metadata"] = list_meta;
      res.body = table.dump();
    } catch (const std::invalid_argument& e) {
      throw bad_request_error(e.what());
    }
    return res;
  }
  json list = {{"kind", r.list_kind}, {"apiVersion", r.api_version(p.version)}, {"metadata", list_meta}, {"items", items}};
  res.body = list.dump();
  return res;
}

HandlerResult watch_objects(ApiState& s, const ApiResource& r, const ResourcePath& p, const HttpRequest& req) {
  ObjectFilter filter = filter_for(req, p);
  std::string rv_text = req.param("resourceVersion");
  int64_t start_rv = -1;  // -1: replay current objects first
  if (!rv_text.empty() && rv_text != "0") {
    try {
      start_rv = std::stoll(rv_text);
    } catch (const std::exception&) {
      throw bad_request_error("resourceVersion: Invalid value: \"" + rv_text + "\": not a resourceVersion this server issued");
    }
    if (start_rv < s.store.history_floor()) {
      throw ApiError(410, "Expired",
                     "too old resource version: " + rv_text + " (" + std::to_string(s.store.history_floor()) + ")");
    }
  }
  bool bookmarks = req.param("allowWatchBookmarks") == "true" || req.param("allowWatchBookmarks") == "1";
  long timeout_s = 1800;
  if (!req.param("timeoutSeconds").empty()) {
    try {
      timeout_s = std::stol(req.param("timeoutSeconds"));
    } catch (const std::exception&) {
      throw bad_request_error("timeoutSeconds: Invalid value: \"" + req.param("timeoutSeconds") + "\": must be an integer");
    }
  }
  HandlerResult result;
  result.response.headers["Content-Type"] = "application/json";
  const ApiResource type = r;
  const std::string version = p.version;
  result.stream = [&s, type, version, filter, start_rv, bookmarks, timeout_s](ResponseStream& out) {
    using clock = std::chrono::steady_clock;
    auto deadline = clock::now() + std::chrono::seconds(timeout_s);
    auto last_bookmark = clock::now();
    std::unique_lock lock(s.mu);
    uint64_t epoch = s.watch_epoch;
    int64_t last = start_rv;
    std::vector<std::string> pending;
    if (last < 0) {
      for (const json& object : s.store.list(type.key(), filter.ns)) {
        if (filter.matches(object)) pending.push_back(watch_line("ADDED", served_object(type, object, version)));
      }
      last = s.store.current_resource_version();
    }
    for (;;) {
      if (last < s.store.history_floor()) {
        lock.unlock();
        out.write(watch_line("ERROR", status_object(410, "Expired",
                                                    "too old resource version: " + std::to_string(last) + " (" +
                                                        std::to_string(s.store.history_floor()) + ")")));
        return;
      }
      for (const StoredEvent& e : s.store.events_after(type.key(), last)) {
        if (filter.matches(e.object)) pending.push_back(watch_line(e.type, served_object(type, e.object, version)));
      }
      last = std::max(last, s.store.current_resource_version());
      auto bookmark_every = std::chrono::milliseconds(s.bookmark_interval_ms.load());
      if (bookmarks && clock::now() - last_bookmark >= bookmark_every) {
        pending.push_back(watch_line(
            "BOOKMARK", {{"kind", type.kind},
                         {"apiVersion", type.api_version(version)},
                         {"metadata", {{"resourceVersion", std::to_string(last)}}}}));
        last_bookmark = clock::now();
      }
      lock.unlock();
      for (const auto& line : pending) {
        if (!out.write(line)) return;
      }
      pending.clear();
      if (clock::now() >= deadline || out.client_gone()) return;
      lock.lock();
      if (s.watch_epoch != epoch) return;
      s.changed.wait_for(lock, std::chrono::milliseconds(100));
      if (s.watch_epoch != epoch) return;
    }
  };
  return result;
}

}  // namespace qsync::kube_test
