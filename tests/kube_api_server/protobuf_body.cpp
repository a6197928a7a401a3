// File: tests/kube_api_server/protobuf_body.cpp
// A protobuf wire-format reader (varints and length-delimited fields are all these messages
// use) and the field numbers of k8s.io/api's generated.proto for the kinds supported.
#include "tests/kube_api_server/protobuf_body.h"

#include <cstdint>
#include <stdexcept>
#include <string_view>

namespace qsync::kube_test {
namespace {

using nlohmann::json;

struct Field {
  int number = 0;
  int wire_type = 0;
  uint64_t varint = 0;
  std::string_view bytes;
};

class WireReader {
 public:
  explicit WireReader(std::string_view data) : data_(data) {}
  bool next(Field& f) {
    if (at_ >= data_.size()) return false;
    uint64_t key = varint();
    f.number = static_cast<int>(key >> 3);
    f.wire_type = static_cast<int>(key & 7);
    switch (f.wire_type) {
      case 0:
        f.varint = varint();
        break;
      case 1:
        skip(8);
        break;
      case 2: {
        uint64_t n = varint();
        if (n > data_.size() - at_) throw std::invalid_argument("protobuf body: a field runs past the end of the message");
        f.bytes = data_.substr(at_, n);
        at_ += n;
        break;
      }
      case 5:
        skip(4);
        break;
      default:
        throw std::invalid_argument("protobuf body: unsupported wire type " + std::to_string(f.wire_type));
    }
    return true;
  }

 private:
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= data_.size()) throw std::invalid_argument("protobuf body: truncated varint");
      uint8_t b = static_cast<uint8_t>(data_[at_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    throw std::invalid_argument("protobuf body: varint too long");
  }
  void skip(size_t n) {
    if (n > data_.size() - at_) throw std::invalid_argument("protobuf body: truncated fixed-width field");
    at_ += n;
  }
  std::string_view data_;
  size_t at_ = 0;
};

std::string base64(std::string_view in) {
  static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(table[(v >> s) & 63]);
  }
  if (i < in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    if (i + 1 < in.size()) v |= uint8_t(in[i + 1]) << 8;
    out.push_back(table[(v >> 18) & 63]);
    out.push_back(table[(v >> 12) & 63]);
    out.push_back(i + 1 < in.size() ? table[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

// A map<string, string|bytes> entry: {key = 1, value = 2}.
std::pair<std::string, std::string_view> map_entry(std::string_view entry) {
  WireReader r(entry);
  Field f;
  std::pair<std::string, std::string_view> out;
  while (r.next(f)) {
    if (f.number == 1) out.first = std::string(f.bytes);
    if (f.number == 2) out.second = f.bytes;
  }
  return out;
}

json owner_reference(std::string_view message) {
  WireReader r(message);
  Field f;
  json out = json::object();
  while (r.next(f)) {
    switch (f.number) {
      case 1: out["kind"] = std::string(f.bytes); break;
      case 3: out["name"] = std::string(f.bytes); break;
      case 4: out["uid"] = std::string(f.bytes); break;
      case 5: out["apiVersion"] = std::string(f.bytes); break;
      case 6: out["controller"] = f.varint != 0; break;
      case 7: out["blockOwnerDeletion"] = f.varint != 0; break;
      default: break;
    }
  }
  return out;
}

json object_meta(std::string_view message) {
  WireReader r(message);
  Field f;
  json meta = json::object();
  while (r.next(f)) {
    switch (f.number) {
      case 1: meta["name"] = std::string(f.bytes); break;
      case 2: meta["generateName"] = std::string(f.bytes); break;
      case 3: meta["namespace"] = std::string(f.bytes); break;
      case 6: meta["resourceVersion"] = std::string(f.bytes); break;
      case 11: {
        auto [k, v] = map_entry(f.bytes);
        meta["labels"][k] = std::string(v);
        break;
      }
      case 12: {
        auto [k, v] = map_entry(f.bytes);
        meta["annotations"][k] = std::string(v);
        break;
      }
      case 13: meta["ownerReferences"].push_back(owner_reference(f.bytes)); break;
      case 14: meta["finalizers"].push_back(std::string(f.bytes)); break;
      default: break;  // server-set fields (uid, timestamps, managedFields) are ignored
    }
  }
  for (const char* empty : {"name", "generateName", "namespace", "resourceVersion"}) {
    if (meta.contains(empty) && meta[empty] == "") meta.erase(empty);
  }
  return meta;
}

// ConfigMap {metadata 1, data 2, binaryData 3, immutable 4};
// Secret {metadata 1, data 2 (bytes), type 3, stringData 4, immutable 5}; Namespace {metadata 1}.
json decode_kind(const std::string& kind, std::string_view raw) {
  WireReader r(raw);
  Field f;
  json out = json::object();
  while (r.next(f)) {
    if (f.number == 1) {
      out["metadata"] = object_meta(f.bytes);
    } else if (kind == "ConfigMap" && f.number == 2) {
      auto [k, v] = map_entry(f.bytes);
      out["data"][k] = std::string(v);
    } else if (kind == "ConfigMap" && f.number == 3) {
      auto [k, v] = map_entry(f.bytes);
      out["binaryData"][k] = base64(v);
    } else if (kind == "ConfigMap" && f.number == 4) {
      out["immutable"] = f.varint != 0;
    } else if (kind == "Secret" && f.number == 2) {
      auto [k, v] = map_entry(f.bytes);
      out["data"][k] = base64(v);
    } else if (kind == "Secret" && f.number == 3) {
      out["type"] = std::string(f.bytes);
    } else if (kind == "Secret" && f.number == 4) {
      auto [k, v] = map_entry(f.bytes);
      out["stringData"][k] = std::string(v);
    } else if (kind == "Secret" && f.number == 5) {
      out["immutable"] = f.varint != 0;
    }
  }
  return out;
}

}  // namespace

json protobuf_body_to_json(const std::string& body) {
  static const std::string magic("k8s\0", 4);
  if (body.compare(0, 4, magic) != 0) {
    throw std::invalid_argument("protobuf body: missing the \"k8s\\0\" prefix of the Kubernetes protobuf envelope");
  }
  WireReader envelope(std::string_view(body).substr(4));
  Field f;
  std::string api_version, kind;
  std::string_view raw;
  while (envelope.next(f)) {
    if (f.number == 1) {
      WireReader type_meta(f.bytes);
      Field t;
      while (type_meta.next(t)) {
        if (t.number == 1) api_version = std::string(t.bytes);
        if (t.number == 2) kind = std::string(t.bytes);
      }
    } else if (f.number == 2) {
      raw = f.bytes;
    }
  }
  if (kind != "ConfigMap" && kind != "Secret" && kind != "Namespace") {
    throw std::invalid_argument("protobuf bodies of kind \"" + kind +
                                "\" are not supported by the test API server; send application/json");
  }
  json out = decode_kind(kind, raw);
  out["apiVersion"] = api_version;
  out["kind"] = kind;
  return out;
}

}  // namespace qsync::kube_test
