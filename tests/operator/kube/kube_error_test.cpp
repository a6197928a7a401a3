// File: tests/operator/kube/kube_error_test.cpp
// Failed answers to typed errors: Status bodies give the API's code, reason and message; other
// bodies a reason from the HTTP code; the is_* predicates classify them.
#include "operator/kube/kube_error.h"

#include <gtest/gtest.h>

#include <string>

namespace qsync::kube {
namespace {

std::string status_body(int code, const std::string& reason, const std::string& message) {
  return kube_status_json(code, reason, message).dump();
}

TEST(KubeErrorTest, StatusBodyGivesReasonAndMessage) {
  KubeError e = kube_error_from_response(404, status_body(404, "NotFound", "pods \"p1\" not found"), "get",
                                         "/api/v1/namespaces/default/pods/p1");
  EXPECT_EQ(e.code(), 404);
  EXPECT_EQ(e.reason(), "NotFound");
  EXPECT_EQ(e.api_message(), "pods \"p1\" not found");
  EXPECT_EQ(e.verb(), "get");
  EXPECT_EQ(e.path(), "/api/v1/namespaces/default/pods/p1");
  std::string what = e.what();
  EXPECT_NE(what.find("get /api/v1/namespaces/default/pods/p1"), std::string::npos) << what;
  EXPECT_NE(what.find("404 NotFound"), std::string::npos) << what;
  EXPECT_NE(what.find("not found"), std::string::npos) << what;
  EXPECT_TRUE(is_not_found(e));
  EXPECT_FALSE(is_conflict(e));
  EXPECT_FALSE(is_transport(e));
}

TEST(KubeErrorTest, AlreadyExistsAndConflictAreTellApart) {
  KubeError exists = kube_error_from_response(409, status_body(409, "AlreadyExists", "pods \"p1\" already exists"),
                                              "create", "/api/v1/namespaces/default/pods");
  KubeError conflict = kube_error_from_response(
      409, status_body(409, "Conflict", "the object has been modified; please apply your changes to the latest version"),
      "update", "/api/v1/namespaces/default/pods/p1");
  EXPECT_TRUE(is_already_exists(exists));
  EXPECT_FALSE(is_conflict(exists));
  EXPECT_TRUE(is_conflict(conflict));
  EXPECT_FALSE(is_already_exists(conflict));
  EXPECT_EQ(conflict.reason(), "Conflict");
}

TEST(KubeErrorTest, GoneAndOtherReasons) {
  KubeError gone = kube_error_from_response(410, status_body(410, "Expired", "too old resource version: 5 (99)"),
                                            "watch", "/api/v1/pods");
  EXPECT_TRUE(is_gone(gone));
  EXPECT_EQ(gone.reason(), "Expired");
  KubeError invalid = kube_error_from_response(422, status_body(422, "Invalid", "spec.replicas: Invalid value"),
                                               "create", "/apis/qsync.io/v1/namespaces/a/jobs");
  EXPECT_EQ(invalid.code(), 422);
  EXPECT_EQ(invalid.reason(), "Invalid");
  EXPECT_FALSE(is_gone(invalid));
}

TEST(KubeErrorTest, StatusWithoutReasonGetsOneFromTheCode) {
  KubeError e = kube_error_from_response(403, R"({"kind":"Status","code":403,"message":"forbidden: user x"})", "list",
                                         "/api/v1/pods");
  EXPECT_EQ(e.reason(), "Forbidden");
  EXPECT_EQ(e.api_message(), "forbidden: user x");
}

TEST(KubeErrorTest, NonStatusBodiesGiveReasonFromCodeAndBodyStart) {
  KubeError html = kube_error_from_response(503, "<html><body>Service Unavailable</body></html>", "get", "/api/v1");
  EXPECT_EQ(html.code(), 503);
  EXPECT_EQ(html.reason(), "InternalError");
  EXPECT_NE(html.api_message().find("Service Unavailable"), std::string::npos);

  KubeError json_not_status = kube_error_from_response(404, R"({"kind":"Pod"})", "get", "/x");
  EXPECT_EQ(json_not_status.reason(), "NotFound");
  EXPECT_TRUE(is_not_found(json_not_status));

  // A "kind" that is not a string is not a Status (found by the kube_watch_event fuzz target:
  // it used to escape as nlohmann's type_error).
  KubeError kind_number = kube_error_from_response(500, R"({"kind":1,"reason":"Expired"})", "watch", "/x");
  EXPECT_EQ(kind_number.reason(), "InternalError");
  EXPECT_NE(kind_number.api_message().find("\"kind\":1"), std::string::npos);

  std::string long_body(5000, 'x');
  KubeError truncated = kube_error_from_response(429, long_body, "get", "/x");
  EXPECT_EQ(truncated.reason(), "TooManyRequests");
  EXPECT_LT(truncated.api_message().size(), 300u);

  EXPECT_EQ(kube_error_from_response(401, "", "get", "/x").reason(), "Unauthorized");
  EXPECT_EQ(kube_error_from_response(410, "gone", "watch", "/x").reason(), "Gone");
  EXPECT_EQ(kube_error_from_response(409, "busy", "update", "/x").reason(), "Conflict");
  EXPECT_TRUE(is_conflict(kube_error_from_response(409, "busy", "update", "/x")));
  EXPECT_EQ(kube_error_from_response(422, "bad", "create", "/x").reason(), "Invalid");
}

TEST(KubeErrorTest, TransportErrorsHaveCodeZero) {
  KubeError e(0, "Transport", "Failed to connect (server http://127.0.0.1:1)", "get", "/api/v1/pods");
  EXPECT_TRUE(is_transport(e));
  EXPECT_FALSE(is_not_found(e));
  EXPECT_NE(std::string(e.what()).find("http://127.0.0.1:1"), std::string::npos);
}

TEST(KubeErrorTest, OtherExceptionsAreNoKubeErrors) {
  std::runtime_error plain("boom");
  EXPECT_FALSE(is_not_found(plain));
  EXPECT_FALSE(is_already_exists(plain));
  EXPECT_FALSE(is_conflict(plain));
  EXPECT_FALSE(is_gone(plain));
  EXPECT_FALSE(is_transport(plain));
}

TEST(KubeErrorTest, StatusJsonHasTheApiShape) {
  nlohmann::json status = kube_status_json(409, "AlreadyExists", "exists");
  EXPECT_EQ(status["kind"], "Status");
  EXPECT_EQ(status["apiVersion"], "v1");
  EXPECT_EQ(status["status"], "Failure");
  EXPECT_EQ(status["code"], 409);
  EXPECT_EQ(status["reason"], "AlreadyExists");
  EXPECT_EQ(status["message"], "exists");
}

}  // namespace
}  // namespace qsync::kube
