// File: tests/kube_api_server/json_patch_test.cpp
// Tests of tests/kube_api_server/json_patch.h: RFC 7386's own examples (section 3 and
// appendix A) for merge_patch, RFC 6902's appendix A and RFC 6901's pointer examples for
// json_patch_apply plus its error messages, and server-side apply: managedFields, merging of
// keyed lists, removal of fields a manager stops applying, conflicts and force.
#include "tests/kube_api_server/json_patch.h"

#include <gtest/gtest.h>

namespace qsync::kube_test {
namespace {

json J(const char* text) { return json::parse(text); }

TEST(MergePatch, Rfc7386Section3Example) {
  const json target = J(R"({"title": "Goodbye!", "author": {"givenName": "John", "familyName": "Doe"},
                             "tags": ["example", "sample"], "content": "This will be unchanged"})");
  const json patch = J(R"({"title": "Hello!", "phoneNumber": "+01-123-456-7890", "author": {"familyName": null},
                            "tags": ["example"]})");
  EXPECT_EQ(merge_patch(target, patch), J(R"({"title": "Hello!", "author": {"givenName": "John"}, "tags": ["example"],
      "content": "This will be unchanged", "phoneNumber": "+01-123-456-7890"})"));
}

TEST(MergePatch, Rfc7386AppendixA) {
  const char* cases[][3] = {
      {R"({"a":"b"})", R"({"a":"c"})", R"({"a":"c"})"},
      {R"({"a":"b"})", R"({"b":"c"})", R"({"a":"b","b":"c"})"},
      {R"({"a":"b"})", R"({"a":null})", R"({})"},
      {R"({"a":"b","b":"c"})", R"({"a":null})", R"({"b":"c"})"},
      {R"({"a":["b"]})", R"({"a":"c"})", R"({"a":"c"})"},
      {R"({"a":"c"})", R"({"a":["b"]})", R"({"a":["b"]})"},
      {R"({"a":{"b":"c"}})", R"({"a":{"b":"d","c":null}})", R"({"a":{"b":"d"}})"},
      {R"({"a":[{"b":"c"}]})", R"({"a":[1]})", R"({"a":[1]})"},
      {R"(["a","b"])", R"(["c","d"])", R"(["c","d"])"},
      {R"({"a":"b"})", R"(["c"])", R"(["c"])"},
      {R"({"a":"foo"})", "null", "null"},
      {R"({"a":"foo"})", R"("bar")", R"("bar")"},
      {R"({"e":null})", R"({"a":1})", R"({"e":null,"a":1})"},
      {R"([1,2])", R"({"a":"b","c":null})", R"({"a":"b"})"},
      {R"({})", R"({"a":{"bb":{"ccc":null}}})", R"({"a":{"bb":{}}})"},
  };
  for (const auto& c : cases) EXPECT_EQ(merge_patch(J(c[0]), J(c[1])), J(c[2])) << c[0] << " + " << c[1];
}

TEST(JsonPatch, Rfc6902AppendixA) {
  const char* cases[][3] = {
      {R"({"foo":"bar"})", R"([{"op":"add","path":"/baz","value":"qux"}])", R"({"baz":"qux","foo":"bar"})"},  // A.1
      {R"({"foo":["bar","baz"]})", R"([{"op":"add","path":"/foo/1","value":"qux"}])", R"({"foo":["bar","qux","baz"]})"},
      {R"({"baz":"qux","foo":"bar"})", R"([{"op":"remove","path":"/baz"}])", R"({"foo":"bar"})"},
      {R"({"foo":["bar","qux","baz"]})", R"([{"op":"remove","path":"/foo/1"}])", R"({"foo":["bar","baz"]})"},
      {R"({"baz":"qux","foo":"bar"})", R"([{"op":"replace","path":"/baz","value":"boo"}])", R"({"baz":"boo","foo":"bar"})"},
      {R"({"foo":{"bar":"baz","waldo":"fred"},"qux":{"corge":"grault"}})",  // A.6
       R"([{"op":"move","from":"/foo/waldo","path":"/qux/thud"}])",
       R"({"foo":{"bar":"baz"},"qux":{"corge":"grault","thud":"fred"}})"},
      {R"({"foo":["all","grass","cows","eat"]})", R"([{"op":"move","from":"/foo/1","path":"/foo/3"}])",
       R"({"foo":["all","cows","eat","grass"]})"},
      {R"({"baz":"qux","foo":["a",2,"c"]})", R"([{"op":"test","path":"/baz","value":"qux"},{"op":"test","path":"/foo/1","value":2}])",
       R"({"baz":"qux","foo":["a",2,"c"]})"},  // A.8
      {R"({"foo":"bar"})", R"([{"op":"add","path":"/child","value":{"grandchild":{}}}])", R"({"foo":"bar","child":{"grandchild":{}}})"},
      {R"({"foo":"bar"})", R"([{"op":"add","path":"/baz","value":"qux","xyz":123}])", R"({"foo":"bar","baz":"qux"})"},  // A.11
      {R"({"/":9,"~1":10})", R"([{"op":"test","path":"/~01","value":10}])", R"({"/":9,"~1":10})"},  // A.14
      {R"({"foo":["bar"]})", R"([{"op":"add","path":"/foo/-","value":["abc","def"]}])", R"({"foo":["bar",["abc","def"]]})"},
      // Beyond the appendix: copy, replacing the whole document, adding at the end index.
      {R"({"a":{"b":1}})", R"([{"op":"copy","from":"/a","path":"/c"}])", R"({"a":{"b":1},"c":{"b":1}})"},
      {R"({"a":1})", R"([{"op":"replace","path":"","value":[1]}])", R"([1])"},
      {R"({"a":[1]})", R"([{"op":"add","path":"/a/1","value":2}])", R"({"a":[1,2]})"},
  };
  for (const auto& c : cases) EXPECT_EQ(json_patch_apply(J(c[0]), J(c[1])), J(c[2])) << c[1];
}

TEST(JsonPatch, Rfc6901PointerExamples) {
  const json doc = J(R"({"foo":["bar","baz"],"":0,"a/b":1,"c%d":2,"e^f":3,"g|h":4,"i\\j":5,"k\"l":6," ":7,"m~n":8})");
  const std::pair<const char*, json> cases[] = {{"", doc}, {"/foo", J(R"(["bar","baz"])")}, {"/foo/0", "bar"}, {"/", 0},
      {"/a~1b", 1}, {"/c%d", 2}, {"/e^f", 3}, {"/g|h", 4}, {"/i\\j", 5}, {"/k\"l", 6}, {"/ ", 7}, {"/m~0n", 8}};
  for (const auto& [pointer, value] : cases)
    EXPECT_NO_THROW(json_patch_apply(doc, json::array({{{"op", "test"}, {"path", pointer}, {"value", value}}}))) << pointer;
}

std::string patch_error(const json& target, const char* operations) {
  try {
    json_patch_apply(target, J(operations));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

TEST(JsonPatch, ErrorsNameTheOperationAndReason) {
  EXPECT_EQ(patch_error(J(R"({"baz":"qux"})"), R"([{"op":"test","path":"/baz","value":"qux"},{"op":"test","path":"/baz","value":"bar"}])"),
            "json patch operation 1 (test /baz): test failed: value is \"qux\", not \"bar\"");  // A.9
  EXPECT_EQ(patch_error(J(R"({"foo":"bar"})"), R"([{"op":"add","path":"/baz/bat","value":"qux"}])"),
            "json patch operation 0 (add /baz/bat): path /baz does not exist");  // A.12
  EXPECT_EQ(patch_error(J(R"({"/":9,"~1":10})"), R"([{"op":"test","path":"/~01","value":"10"}])"),
            "json patch operation 0 (test /~01): test failed: value is 10, not \"10\"");  // A.15
  EXPECT_EQ(patch_error(J(R"({"a":[1,2]})"), R"([{"op":"remove","path":"/a/01"}])"),
            "json patch operation 0 (remove /a/01): array index \"01\" is not a non-negative integer without leading zeros");
  EXPECT_EQ(patch_error(J(R"({"a":[1,2]})"), R"([{"op":"replace","path":"/a/2","value":0}])"),
            "json patch operation 0 (replace /a/2): array index 2 is out of range (size 2)");
  EXPECT_EQ(patch_error(J(R"({"a":{"b":1}})"), R"([{"op":"move","from":"/a","path":"/a/b/c"}])"),
            "json patch operation 0 (move /a/b/c): cannot move /a into its own child");
  EXPECT_EQ(patch_error(J(R"({})"), R"([{"op":"remove","path":"/x"}])"), "json patch operation 0 (remove /x): path /x does not exist");
  EXPECT_EQ(patch_error(J(R"({})"), R"([{"op":"replace","path":"/a~1b/c~0d","value":1}])"),
            "json patch operation 0 (replace /a~1b/c~0d): path /a~1b does not exist");
  EXPECT_EQ(patch_error(J(R"({})"), R"([{"op":"add","path":"/x"}])"), "json patch operation 0 (add /x): missing \"value\"");
  EXPECT_EQ(patch_error(J(R"({})"), R"([{"path":"/x"}])"), "json patch operation 0: missing \"op\"");
  EXPECT_EQ(patch_error(J(R"({})"), R"([{"op":"frob","path":"/x"}])"),
            "json patch operation 0 (frob /x): unknown op \"frob\" (want add, remove, replace, move, copy or test)");
  EXPECT_EQ(patch_error(J(R"({})"), R"([{"op":"add","path":"x","value":1}])"),
            "json patch operation 0 (add x): path \"x\" must be empty or start with '/'");
  EXPECT_EQ(patch_error(J(R"({})"), R"([{"op":"add","path":"/a~2","value":1}])"),
            "json patch operation 0 (add /a~2): path \"/a~2\" has '~' not followed by 0 or 1");
  EXPECT_EQ(patch_error(J(R"({})"), R"({"op":"add"})"), "a JSON patch must be an array of operations");
  // Adding null is a value, not a missing one.
  EXPECT_EQ(json_patch_apply(J(R"({})"), J(R"([{"op":"add","path":"/x","value":null}])")), J(R"({"x":null})"));
}

// ---- server-side apply ----

json job(const char* spec_json) {
  return {{"apiVersion", "qsync.io/v1alpha1"}, {"kind", "HybridTrainingJob"},
          {"metadata", {{"name", "j"}, {"namespace", "ns"}}}, {"spec", J(spec_json)}};
}

const json* entry_of(const json& object, const std::string& manager) {
  for (const json& e : object["metadata"]["managedFields"])
    if (e["manager"] == manager) return &e;
  return nullptr;
}

std::string conflict_of(const json& live, const json& applied, const std::string& manager) {
  try {
    server_side_apply(live, applied, manager, false);
  } catch (const ApplyConflict& e) {
    return e.what();
  }
  return "no conflict";
}

TEST(ServerSideApply, CreateRecordsManagedFields) {
  json applied = job(R"({"replicas": 2, "containers": [{"name": "c", "image": "i"}], "args": ["a"], "unset": null})");
  applied["metadata"]["labels"] = {{"team", "ml"}};
  applied["metadata"]["uid"] = "ignored";
  const json out = server_side_apply(nullptr, applied, "alice", false);
  EXPECT_EQ(out["apiVersion"], "qsync.io/v1alpha1");
  EXPECT_EQ(out["kind"], "HybridTrainingJob");
  EXPECT_EQ(out["metadata"]["name"], "j");
  EXPECT_EQ(out["metadata"]["namespace"], "ns");
  EXPECT_FALSE(out["metadata"].contains("uid"));
  EXPECT_EQ(out["metadata"]["labels"], J(R"({"team":"ml"})"));
  EXPECT_EQ(out["spec"], J(R"({"replicas": 2, "containers": [{"name": "c", "image": "i"}], "args": ["a"]})"));
  ASSERT_EQ(out["metadata"]["managedFields"].size(), 1u);
  const json& e = out["metadata"]["managedFields"][0];
  EXPECT_EQ(e["manager"], "alice");
  EXPECT_EQ(e["operation"], "Apply");
  EXPECT_EQ(e["apiVersion"], "qsync.io/v1alpha1");
  EXPECT_EQ(e["fieldsType"], "FieldsV1");
  EXPECT_TRUE(e["time"].is_string());
  EXPECT_EQ(e["fieldsV1"], J(R"({"f:metadata": {"f:labels": {"f:team": {}}},
      "f:spec": {"f:replicas": {}, "f:args": {}, "f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:name": {}, "f:image": {}}}}})"));
}

TEST(ServerSideApply, ReapplyRemovesDroppedFieldsAndKeepsOthers) {
  const json first = job(R"({"replicas": 2, "mode": "x", "pool": {"gpu": 1}, "containers": [{"name": "c"}, {"name": "d"}]})");
  json live = server_side_apply(nullptr, first, "alice", false);
  live["status"] = {{"phase", "Running"}};  // written by someone else, not through apply
  live["metadata"]["uid"] = "u-1";
  const json out = server_side_apply(live, job(R"({"replicas": 3, "containers": [{"name": "c"}]})"), "alice", false);
  EXPECT_EQ(out["spec"], J(R"({"replicas": 3, "containers": [{"name": "c"}]})"));  // mode, pool, d gone
  EXPECT_EQ(out["status"], J(R"({"phase": "Running"})"));
  EXPECT_EQ(out["metadata"]["uid"], "u-1");
  ASSERT_EQ(out["metadata"]["managedFields"].size(), 1u);
  EXPECT_EQ(out["metadata"]["managedFields"][0]["fieldsV1"],
            J(R"({"f:spec": {"f:replicas": {}, "f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:name": {}}}}})"));
}

TEST(ServerSideApply, ConflictWithAnotherManagerUnlessSameValue) {
  const json live = server_side_apply(nullptr, job(R"({"replicas": 2, "mode": "x"})"), "alice", false);
  EXPECT_EQ(conflict_of(live, job(R"({"replicas": 3})"), "bob"), "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas");
  EXPECT_EQ(conflict_of(live, job(R"({"replicas": 3, "mode": "y"})"), "bob"),
            "Apply failed with 2 conflicts: conflicts with \"alice\":\n- .spec.mode\n- .spec.replicas");
  // The same value is shared ownership; when alice stops applying it, bob's claim keeps it.
  const json shared = server_side_apply(live, job(R"({"replicas": 2, "extra": true})"), "bob", false);
  EXPECT_EQ(shared["metadata"]["managedFields"].size(), 2u);
  const json after = server_side_apply(shared, job(R"({"mode": "x"})"), "alice", false);
  EXPECT_EQ(after["spec"], J(R"({"replicas": 2, "mode": "x", "extra": true})"));
}

TEST(ServerSideApply, ForceMovesOwnership) {
  const json live = server_side_apply(nullptr, job(R"({"replicas": 2, "mode": "x"})"), "alice", false);
  const json out = server_side_apply(live, job(R"({"replicas": 5})"), "bob", true);
  EXPECT_EQ(out["spec"], J(R"({"replicas": 5, "mode": "x"})"));
  EXPECT_EQ((*entry_of(out, "alice"))["fieldsV1"], J(R"({"f:spec": {"f:mode": {}}})"));
  EXPECT_EQ((*entry_of(out, "bob"))["fieldsV1"], J(R"({"f:spec": {"f:replicas": {}}})"));
  // Alice no longer owns replicas: dropping it from her apply leaves bob's value.
  EXPECT_EQ(server_side_apply(out, job(R"({"mode": "x"})"), "alice", false)["spec"]["replicas"], 5);
  // A manager whose every field is taken disappears from managedFields.
  const json all = server_side_apply(out, job(R"({"mode": "z"})"), "bob", true);
  EXPECT_EQ(entry_of(all, "alice"), nullptr);
}

TEST(ServerSideApply, KeyedListsMergeByNameAndConditionsByType) {
  const json live = server_side_apply(nullptr, job(R"({"containers": [{"name": "c", "image": "i1"}]})"), "alice", false);
  const json both = server_side_apply(live, job(R"({"containers": [{"name": "d", "image": "j"}]})"), "bob", false);
  EXPECT_EQ(both["spec"]["containers"], J(R"([{"name": "c", "image": "i1"}, {"name": "d", "image": "j"}])"));
  EXPECT_EQ(conflict_of(both, job(R"({"containers": [{"name": "c", "image": "other"}]})"), "bob"),
            "Apply failed with 1 conflict: conflict with \"alice\": .spec.containers[name=\"c\"].image");
  // Alice dropping her container leaves bob's.
  const json only_d = server_side_apply(both, job(R"({"replicas": 1})"), "alice", false);
  EXPECT_EQ(only_d["spec"], J(R"({"replicas": 1, "containers": [{"name": "d", "image": "j"}]})"));

  json status = job(R"({})");
  status["status"] = J(R"({"conditions": [{"type": "Ready", "status": "True"}]})");
  json other = job(R"({})");
  other["status"] = J(R"({"conditions": [{"type": "Scaled", "status": "False"}]})");
  const json merged = server_side_apply(server_side_apply(nullptr, status, "a", false), other, "b", false);
  EXPECT_EQ(merged["status"]["conditions"], J(R"([{"type": "Ready", "status": "True"}, {"type": "Scaled", "status": "False"}])"));
}

TEST(ServerSideApply, AtomicListsReplaceAndConflictWhole) {
  const json live = server_side_apply(nullptr, job(R"({"args": ["a", "b"]})"), "alice", false);
  EXPECT_EQ(conflict_of(live, job(R"({"args": ["c"]})"), "bob"), "Apply failed with 1 conflict: conflict with \"alice\": .spec.args");
  EXPECT_EQ(server_side_apply(live, job(R"({"args": ["c"]})"), "alice", false)["spec"]["args"], J(R"(["c"])"));
}

TEST(ServerSideApply, EmptiedMapsGoAndUpdateManagersAreNamed) {
  const json live = server_side_apply(nullptr, job(R"({"pool": {"training": {"count": 2}}, "mode": "x"})"), "alice", false);
  EXPECT_EQ(server_side_apply(live, job(R"({"mode": "x"})"), "alice", false)["spec"], J(R"({"mode": "x"})"));
  json updated = live;
  updated["metadata"]["managedFields"].push_back({{"manager", "kubectl-edit"}, {"operation", "Update"}, {"apiVersion", "qsync.io/v1alpha1"},
                                                   {"fieldsType", "FieldsV1"}, {"fieldsV1", J(R"({"f:spec": {"f:suspend": {}}})")}});
  updated["spec"]["suspend"] = true;
  EXPECT_EQ(conflict_of(updated, job(R"({"suspend": false})"), "alice"),
            "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using qsync.io/v1alpha1: .spec.suspend");
  // Replacing a map another manager owns a field inside with a scalar also conflicts.
  EXPECT_EQ(conflict_of(live, job(R"({"pool": 3})"), "bob"),
            "Apply failed with 1 conflict: conflict with \"alice\": .spec.pool.training.count");
}

TEST(ServerSideApply, NoOpApplyKeepsTheEntryTime) {
  json live = server_side_apply(nullptr, job(R"({"replicas": 2})"), "alice", false);
  live["metadata"]["managedFields"][0]["time"] = "2000-01-01T00:00:00Z";
  const json same = server_side_apply(live, job(R"({"replicas": 2})"), "alice", false);
  EXPECT_EQ(same, live);
  const json changed = server_side_apply(live, job(R"({"replicas": 3})"), "alice", false);
  EXPECT_NE(changed["metadata"]["managedFields"][0]["time"], "2000-01-01T00:00:00Z");
}

TEST(ServerSideApply, RejectsBadArguments) {
  EXPECT_THROW(server_side_apply(nullptr, J("[1]"), "alice", false), std::invalid_argument);
  EXPECT_THROW(server_side_apply(nullptr, job("{}"), "", false), std::invalid_argument);
}

}  // namespace
}  // namespace qsync::kube_test
