// File: tests/planner/spd_plan_test.cpp
// Tests of planner/spd_plan.h: the plan file round trip (with and without a head-grouping layout
// and a weights file), bad files refused with the file and the field named, budget parsing,
// classification by the two thresholds, names, the dropped mask, and the refusal of a plan made
// for another model, hash or TP degree.
#include "planner/spd_plan.h"

#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "planner/atomic_file.h"
#include "tests/planner/planner_test_support.h"

namespace qsync {
namespace {

using nlohmann::json;
using qsync::testing::expect_error;
using qsync::testing::ScratchDir;

SpdPlan sample_plan() {
  SpdPlan p;
  p.model = "char-gpt";
  p.model_hash = 0x9f2c00000000abcdULL;
  p.tp_degree = 2;
  p.blocks = 4;
  p.weights = "plan.spd-weights.qtw";
  p.budget = {SpdBudgetMetric::PERPLEXITY, 0.01, 0.9};
  p.tau1 = 0.0125;
  p.tau2 = 0.05;
  p.sensitivity = {{3, 0.001, 0.002, SpdBlockClass::INSENSITIVE},
                   {2, 0.02, 0.03, SpdBlockClass::SENSITIVE},
                   {1, 0.4, 0.3, SpdBlockClass::EXTREMELY_SENSITIVE},
                   {0, -0.001, 0.0, SpdBlockClass::INSENSITIVE}};
  p.dropped = {{3, SpdStrategy::ZERO_SHOT}, {0, SpdStrategy::ZERO_SHOT}, {1, SpdStrategy::HEAD_GROUPED}};
  p.heads_of_rank = {{{0, 1}, {2, 3}}, {{0, 2}, {3, 1}}, {{0, 1}, {2, 3}}, {{0, 1}, {2, 3}}};
  p.mlp_slice_of_rank = {{0, 1}, {1, 0}, {0, 1}, {0, 1}};
  p.perplexity_tp = 4.25;
  p.perplexity_planned = 4.29;
  p.accuracy_tp = 0.41;
  p.accuracy_planned = 0.405;
  p.allreduce_seconds = 1.5e-3;
  p.block_compute_seconds = 2e-4;
  p.decode_token_seconds_tp = 0.0136;
  p.decode_token_seconds_planned = 0.0091;
  p.saving = 1 - 0.0091 / 0.0136;
  return p;
}

void expect_same(const SpdPlan& a, const SpdPlan& b) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.model_hash, b.model_hash);
  EXPECT_EQ(a.tp_degree, b.tp_degree);
  EXPECT_EQ(a.blocks, b.blocks);
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_EQ(a.budget.metric, b.budget.metric);
  EXPECT_EQ(a.budget.limit, b.budget.limit);
  EXPECT_EQ(a.budget.confidence, b.budget.confidence);
  EXPECT_EQ(a.tau1, b.tau1);
  EXPECT_EQ(a.tau2, b.tau2);
  ASSERT_EQ(a.sensitivity.size(), b.sensitivity.size());
  for (size_t i = 0; i < a.sensitivity.size(); ++i) {
    EXPECT_EQ(a.sensitivity[i].block, b.sensitivity[i].block);
    EXPECT_EQ(a.sensitivity[i].progressive, b.sensitivity[i].progressive);
    EXPECT_EQ(a.sensitivity[i].alone, b.sensitivity[i].alone);
    EXPECT_EQ(a.sensitivity[i].block_class, b.sensitivity[i].block_class);
  }
  ASSERT_EQ(a.dropped.size(), b.dropped.size());
  for (size_t i = 0; i < a.dropped.size(); ++i) {
    EXPECT_EQ(a.dropped[i].block, b.dropped[i].block);
    EXPECT_EQ(a.dropped[i].strategy, b.dropped[i].strategy);
  }
  EXPECT_EQ(a.heads_of_rank, b.heads_of_rank);
  EXPECT_EQ(a.mlp_slice_of_rank, b.mlp_slice_of_rank);
  EXPECT_EQ(a.perplexity_tp, b.perplexity_tp);
  EXPECT_EQ(a.perplexity_planned, b.perplexity_planned);
  EXPECT_EQ(a.accuracy_tp, b.accuracy_tp);
  EXPECT_EQ(a.accuracy_planned, b.accuracy_planned);
  EXPECT_EQ(a.allreduce_seconds, b.allreduce_seconds);
  EXPECT_EQ(a.block_compute_seconds, b.block_compute_seconds);
  EXPECT_EQ(a.decode_token_seconds_tp, b.decode_token_seconds_tp);
  EXPECT_EQ(a.decode_token_seconds_planned, b.decode_token_seconds_planned);
  EXPECT_EQ(a.saving, b.saving);
}

// Writes the sample plan, edits its JSON with `edit`, and expects reading to fail naming `pieces`.
template <typename Edit>
void expect_refused(Edit&& edit, const std::vector<std::string>& pieces) {
  ScratchDir dir;
  const std::string path = dir.file("plan.json");
  spd_plan_write(sample_plan(), path);
  json j = json::parse(file_read_all(path));
  edit(j);
  atomic_file_write(path, j.dump());
  std::vector<std::string> all = pieces;
  all.push_back(path);
  expect_error<std::invalid_argument>([&] { spd_plan_read(path); }, all);
}

TEST(SpdPlan, RoundTripsThroughAFile) {
  ScratchDir dir;
  const SpdPlan p = sample_plan();
  spd_plan_write(p, dir.file("plan.json"));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"plan.json"});  // no temp file left
  expect_same(spd_plan_read(dir.file("plan.json")), p);
  const json j = json::parse(file_read_all(dir.file("plan.json")));
  EXPECT_EQ(j.at("format"), "qsync-spd-plan");
  EXPECT_EQ(j.at("model_hash"), "0x9f2c00000000abcd");
  EXPECT_EQ(j.at("dropped")[2].at("strategy"), "head-grouped");
  EXPECT_EQ(j.at("sensitivity")[2].at("class"), "extremely-sensitive");
  EXPECT_EQ(j.at("budget").at("max_relative_increase"), 0.01);

  SpdPlan plain = p;  // no weights file, no layout, an accuracy budget
  plain.weights.clear();
  plain.heads_of_rank.clear();
  plain.mlp_slice_of_rank.clear();
  plain.dropped = {{2, SpdStrategy::DISTILLED}};
  plain.budget = {SpdBudgetMetric::ACCURACY, 0.005};
  spd_plan_write(plain, dir.file("plain.json"));
  expect_same(spd_plan_read(dir.file("plain.json")), plain);
  const json k = json::parse(file_read_all(dir.file("plain.json")));
  EXPECT_TRUE(k.at("weights").is_null());
  EXPECT_TRUE(k.at("layout").is_null());
  EXPECT_EQ(k.at("budget").at("max_drop"), 0.005);

  // A plan written before the budget's confidence bound reads as the point test (0).
  json old = json::parse(file_read_all(dir.file("plan.json")));
  EXPECT_EQ(old.at("budget").at("confidence"), 0.9);
  old["budget"].erase("confidence");
  atomic_file_write(dir.file("old.json"), old.dump());
  EXPECT_EQ(spd_plan_read(dir.file("old.json")).budget.confidence, 0.0);
}

TEST(SpdPlan, DroppedMaskMarksTheDroppedBlocks) {
  EXPECT_EQ(sample_plan().dropped_mask(), (std::vector<bool>{true, true, false, true}));
  SpdPlan none = sample_plan();
  none.dropped.clear();
  EXPECT_EQ(none.dropped_mask(), std::vector<bool>(4, false));
}

TEST(SpdPlan, RefusesBadFilesNamingTheField) {
  ScratchDir dir;
  expect_error<std::invalid_argument>([&] { spd_plan_read(dir.file("missing.json")); },
                                      {dir.file("missing.json"), "spd-plan"});
  atomic_file_write(dir.file("broken.json"), "{\"format\": ");
  expect_error<std::invalid_argument>([&] { spd_plan_read(dir.file("broken.json")); }, {"not valid JSON"});
  // A number past double's range (nlohmann's out_of_range, once escaping unexplained).
  atomic_file_write(dir.file("huge.json"), "{\"format\": \"qsync-spd-plan\", \"tau1\": 1e999}");
  expect_error<std::invalid_argument>([&] { spd_plan_read(dir.file("huge.json")); }, {"huge.json", "not valid JSON"});

  expect_refused([](json& j) { j["format"] = "qsync-device-profile"; }, {"'format'", "qsync-spd-plan"});
  expect_refused([](json& j) { j["version"] = 7; }, {"'version'", "7"});
  expect_refused([](json& j) { j.erase("model"); }, {"'model'", "missing"});
  expect_refused([](json& j) { j["model_hash"] = "0xzz"; }, {"'model_hash'", "0xzz"});
  expect_refused([](json& j) { j["tp_degree"] = 0; }, {"'tp_degree'"});
  expect_refused([](json& j) { j["budget"]["metric"] = "loss"; }, {"'budget.metric'", "loss"});
  expect_refused([](json& j) { j["budget"].erase("max_relative_increase"); }, {"'budget.max_relative_increase'"});
  expect_refused([](json& j) { j["budget"]["confidence"] = 1.0; }, {"'budget.confidence'", "[0.5, 1)"});
  expect_refused([](json& j) { j["budget"]["confidence"] = 0.2; }, {"'budget.confidence'", "[0.5, 1)"});
  expect_refused([](json& j) { j["thresholds"]["tau1"] = 1.0; }, {"'thresholds'", "tau1 <= tau2"});
  expect_refused([](json& j) { j["sensitivity"][1]["class"] = "mild"; }, {"'sensitivity[1].class'", "mild"});
  expect_refused([](json& j) { j["sensitivity"][0]["progressive"] = "big"; }, {"'sensitivity[0].progressive'"});
  expect_refused([](json& j) { j["dropped"][1]["block"] = 4; }, {"'dropped[1].block'", "0..3", "4"});
  expect_refused([](json& j) { j["dropped"][1]["block"] = 3; }, {"'dropped[1].block'", "twice"});
  expect_refused([](json& j) { j["dropped"][0]["strategy"] = "pruned"; }, {"'dropped[0].strategy'", "pruned"});
  expect_refused([](json& j) { j["layout"] = nullptr; }, {"'layout'", "head-grouped"});
  expect_refused([](json& j) { j["layout"]["heads_of_rank"][1][1] = json::array({3, 0}); },
                 {"'layout.heads_of_rank[1][1][1]'", "head 0 twice"});
  expect_refused([](json& j) { j["layout"]["mlp_slice_of_rank"][2] = json::array({1, 1}); },
                 {"'layout.mlp_slice_of_rank[2][1]'", "twice"});
  expect_refused([](json& j) { j["layout"]["heads_of_rank"].erase(3); }, {"'layout'", "all 4 blocks"});
  expect_refused([](json& j) { j["predicted"].erase("saving"); }, {"'predicted.saving'", "missing"});
  expect_refused([](json& j) { j["calibration"]["perplexity_tp"] = nullptr; }, {"'calibration.perplexity_tp'"});
}

TEST(SpdBudget, ParsesPercentAndFractionForms) {
  SpdBudget b = spd_budget_parse("ppl:1%");
  EXPECT_EQ(b.metric, SpdBudgetMetric::PERPLEXITY);
  EXPECT_DOUBLE_EQ(b.limit, 0.01);
  EXPECT_DOUBLE_EQ(spd_budget_parse("ppl:0.01").limit, 0.01);
  EXPECT_DOUBLE_EQ(spd_budget_parse("ppl:0").limit, 0.0);
  b = spd_budget_parse("acc:0.5%");
  EXPECT_EQ(b.metric, SpdBudgetMetric::ACCURACY);
  EXPECT_DOUBLE_EQ(b.limit, 0.005);
  EXPECT_DOUBLE_EQ(spd_budget_parse("acc:0.02").limit, 0.02);
  for (const char* bad : {"1%", "loss:1%", "ppl:", "ppl:-1%", "ppl:1%%", "ppl:x", "acc:150%", "ppl:1e999"})
    expect_error<std::invalid_argument>([&] { spd_budget_parse(bad); }, {bad, "ppl:1%", "acc:0.5%"});
}

TEST(SpdClassify, UsesTheTwoThresholdsInclusively) {
  EXPECT_EQ(spd_classify(-0.1, 0.01, 0.05), SpdBlockClass::INSENSITIVE);
  EXPECT_EQ(spd_classify(0.01, 0.01, 0.05), SpdBlockClass::INSENSITIVE);
  EXPECT_EQ(spd_classify(0.0100001, 0.01, 0.05), SpdBlockClass::SENSITIVE);
  EXPECT_EQ(spd_classify(0.05, 0.01, 0.05), SpdBlockClass::SENSITIVE);
  EXPECT_EQ(spd_classify(0.06, 0.01, 0.05), SpdBlockClass::EXTREMELY_SENSITIVE);
  EXPECT_STREQ(spd_block_class_name(SpdBlockClass::EXTREMELY_SENSITIVE), "extremely-sensitive");
}

TEST(SpdStrategyNames, RoundTripAndRefuseUnknown) {
  for (SpdStrategy s : {SpdStrategy::ZERO_SHOT, SpdStrategy::DISTILLED, SpdStrategy::HEAD_GROUPED})
    EXPECT_EQ(spd_strategy_from_name(spd_strategy_name(s)), s);
  expect_error<std::invalid_argument>([] { spd_strategy_from_name("auto"); }, {"'auto'", "zero-shot", "head-grouped"});
}

TEST(SpdPlan, RefusesAPlanForAnotherModelHashOrDegree) {
  const SpdPlan p = sample_plan();
  EXPECT_NO_THROW(spd_plan_check_matches(p, "char-gpt", 0x9f2c00000000abcdULL, 2));
  expect_error<std::invalid_argument>([&] { spd_plan_check_matches(p, "tiny-gpt", 0x9f2c00000000abcdULL, 2); },
                                      {"'char-gpt'", "'tiny-gpt'", "qsync-worker spd-plan --model tiny-gpt"});
  expect_error<std::invalid_argument>([&] { spd_plan_check_matches(p, "char-gpt", 0x1234, 2); },
                                      {"0x9f2c00000000abcd", "0x0000000000001234"});
  expect_error<std::invalid_argument>([&] { spd_plan_check_matches(p, "char-gpt", 0x9f2c00000000abcdULL, 4); },
                                      {"at TP 2", "at TP 4", "--tp 4"});
}

}  // namespace
}  // namespace qsync
