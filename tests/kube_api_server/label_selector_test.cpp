// File: tests/kube_api_server/label_selector_test.cpp
// Tests of tests/kube_api_server/label_selector.h: every label-selector operator against
// present and absent labels, whitespace and the empty selector, the errors for malformed
// selectors, and field selectors over the indexed fields (including escapes and the error for
// an unsupported field).
#include "tests/kube_api_server/label_selector.h"

#include <gtest/gtest.h>

namespace qsync::kube_test {
namespace {

const json kLabels = {{"app", "qsync"}, {"tier", "worker"}, {"rank", "3"}, {"example.com/pool", "h200"}, {"empty", ""}};

bool selects(const std::string& selector, const json& labels = kLabels) {
  return LabelSelector::parse(selector).matches(labels);
}

TEST(LabelSelector, EmptySelectorMatchesEverything) {
  EXPECT_TRUE(LabelSelector::parse("").empty());
  EXPECT_TRUE(LabelSelector::parse("   ").empty());
  EXPECT_TRUE(selects(""));
  EXPECT_TRUE(selects("", nullptr));
  EXPECT_FALSE(LabelSelector::parse("app").empty());
}

TEST(LabelSelector, Equality) {
  EXPECT_TRUE(selects("app=qsync"));
  EXPECT_TRUE(selects("app==qsync"));
  EXPECT_FALSE(selects("app=other"));
  EXPECT_FALSE(selects("missing=qsync"));
  EXPECT_TRUE(selects("example.com/pool=h200"));
  EXPECT_TRUE(selects("empty="));  // the empty value
  EXPECT_FALSE(selects("app="));
}

TEST(LabelSelector, InequalityAlsoMatchesAbsentLabels) {
  EXPECT_FALSE(selects("app!=qsync"));
  EXPECT_TRUE(selects("app!=other"));
  EXPECT_TRUE(selects("missing!=x"));
  EXPECT_TRUE(selects("app!=x", nullptr));
}

TEST(LabelSelector, SetBasedRequirements) {
  EXPECT_TRUE(selects("tier in (worker,server)"));
  EXPECT_FALSE(selects("tier in (server)"));
  EXPECT_FALSE(selects("missing in (worker)"));
  EXPECT_TRUE(selects("tier notin (server, planner)"));
  EXPECT_FALSE(selects("tier notin (worker)"));
  EXPECT_TRUE(selects("missing notin (worker)"));
  EXPECT_TRUE(selects("empty in (,x)"));  // an empty value in a set
}

TEST(LabelSelector, ExistenceAndNonExistence) {
  EXPECT_TRUE(selects("app"));
  EXPECT_FALSE(selects("missing"));
  EXPECT_TRUE(selects("!missing"));
  EXPECT_FALSE(selects("!app"));
  EXPECT_FALSE(selects("app", nullptr));
  EXPECT_TRUE(selects("!app", nullptr));
}

TEST(LabelSelector, IntegerComparisons) {
  EXPECT_TRUE(selects("rank>2"));
  EXPECT_FALSE(selects("rank>3"));
  EXPECT_TRUE(selects("rank<4"));
  EXPECT_FALSE(selects("app>1"));  // not an integer label value
  EXPECT_FALSE(selects("missing<9"));
}

TEST(LabelSelector, AllRequirementsMustHoldAndWhitespaceIsTolerated) {
  EXPECT_TRUE(selects("app=qsync,tier in (worker),!missing"));
  EXPECT_TRUE(selects("  app = qsync ,  tier   in(worker , x) , rank  "));
  EXPECT_FALSE(selects("app=qsync,tier=server"));
}

TEST(LabelSelector, MalformedSelectorsNameTheBadPart) {
  auto error_of = [](const std::string& s) {
    try {
      LabelSelector::parse(s);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of("a=b=c"), "invalid label selector \"a=b=c\": found '=', expected: ',' or end of string");
  EXPECT_EQ(error_of("a in b"), "invalid label selector \"a in b\": found 'b', expected: '(' after 'in'");
  EXPECT_EQ(error_of("a in (x"), "invalid label selector \"a in (x\": found 'end of string', expected: ',' or ')' in the value set of \"a\"");
  EXPECT_EQ(error_of("a notin ()"), "invalid label selector \"a notin ()\": the value set of \"a\" can't be empty for 'in' and 'notin'");
  EXPECT_EQ(error_of("a,"), "invalid label selector \"a,\": found 'end of string', expected: identifier");
  EXPECT_EQ(error_of(",a"), "invalid label selector \",a\": found ',', expected: identifier");
  EXPECT_EQ(error_of("!a=b"), "invalid label selector \"!a=b\": found '=', expected: ',' or end of string");
  EXPECT_EQ(error_of("a>x"), "invalid label selector \"a>x\": found 'x', expected: an integer after '>'");
  EXPECT_NE(error_of("-a=b").find("key \"-a\" must be 1-63"), std::string::npos);
  EXPECT_NE(error_of("Bad_Prefix/a=b").find("prefix of key \"Bad_Prefix/a\""), std::string::npos);
  EXPECT_NE(error_of("a=b!c").find("found '!'"), std::string::npos);
  EXPECT_NE(error_of("a=" + std::string(64, 'v')).find("must be empty or 1-63"), std::string::npos);
}

const json kPod = {
    {"metadata", {{"name", "worker-0"}, {"namespace", "train"}}},
    {"spec", {{"nodeName", "node-a"}}},
    {"status", {{"phase", "Running"}}},
};

TEST(FieldSelector, IndexedFields) {
  EXPECT_TRUE(field_selector_matches("", kPod));
  EXPECT_TRUE(field_selector_matches("metadata.name=worker-0", kPod));
  EXPECT_TRUE(field_selector_matches("metadata.name==worker-0", kPod));
  EXPECT_FALSE(field_selector_matches("metadata.name=worker-1", kPod));
  EXPECT_TRUE(field_selector_matches("metadata.namespace=train,status.phase!=Failed", kPod));
  EXPECT_FALSE(field_selector_matches("metadata.namespace=train,status.phase!=Running", kPod));
  EXPECT_TRUE(field_selector_matches("spec.nodeName=node-a", kPod));
  // An unscheduled Pod has no nodeName: it reads as "".
  const json pending = {{"metadata", {{"name", "p"}}}, {"status", {{"phase", "Pending"}}}};
  EXPECT_TRUE(field_selector_matches("spec.nodeName=", pending));
  EXPECT_FALSE(field_selector_matches("spec.nodeName!=", pending));
}

TEST(FieldSelector, EventInvolvedObjectAndEscapes) {
  const json event = {{"metadata", {{"name", "e1"}, {"namespace", "train"}}},
                      {"involvedObject", {{"kind", "HybridTrainingJob"}, {"name", "job,a=b"}, {"uid", "u-1"}}},
                      {"reason", "Scaled"}, {"type", "Normal"}};
  EXPECT_TRUE(field_selector_matches("involvedObject.kind=HybridTrainingJob,involvedObject.uid=u-1", event));
  EXPECT_TRUE(field_selector_matches("involvedObject.name=job\\,a\\=b", event));
  EXPECT_FALSE(field_selector_matches("involvedObject.name=job", event));
  EXPECT_TRUE(field_selector_matches("reason=Scaled,type=Normal", event));
}

TEST(FieldSelector, UnsupportedFieldsAndMalformedTermsThrow) {
  try {
    field_selector_matches("spec.replicas=3", kPod);
    FAIL() << "expected an exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "field label not supported: spec.replicas");
  }
  EXPECT_THROW(field_selector_matches("involvedObject.color=red", kPod), std::invalid_argument);
  EXPECT_THROW(field_selector_matches("metadata.name", kPod), std::invalid_argument);
  EXPECT_THROW(field_selector_matches("=x", kPod), std::invalid_argument);
}

}  // namespace
}  // namespace qsync::kube_test
