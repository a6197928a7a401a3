// File: tests/worker/tp/tp_infer_multiprocess_test.cpp
// The exact simulation against real ranks: 2 ranks as threads, each with its own rendezvous and
// Gloo collectives on 127.0.0.1 (TP, SPD on one block, SPD on all, prefill and decode), and
// `qsync-worker infer` run as 2 processes (RANK / WORLD_SIZE / MASTER_PORT) on a checkpoint,
// whose --logits-out and summary are compared with the simulation (all syncs, --drop, and an SPD
// plan carrying a regrouped layout and its own weights file). Also the CLI's refusals: a TP
// degree that does not divide the heads, --tp other than WORLD_SIZE, a missing checkpoint, an SPD
// plan for another model, a prompt longer than the context; and --eval's held-out windows.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "planner/spd_plan.h"
#include "tests/e2e/process.h"
#include "tests/worker/tp/tiny_gpt.h"
#include "worker/checkpoint.h"
#include "worker/data/char_corpus.h"
#include "worker/dist/collectives.h"
#include "worker/tp/transformer_weights.h"
#include "worker/tp/tp_transformer.h"

namespace qsync {
namespace {

using test::max_abs_diff;
using test::random_tokens;
using test::TinyGpt;

// Gloo sums two ranks' floats (a + b is commutative) and the per-shard code is the simulation's:
// results agree to the last bit in practice; the bound allows for a GEMM library that picks a
// different kernel per thread count.
constexpr float RANKS_TOLERANCE = 1e-5f;

// Runs `body` on `world` ranks (threads), each with its own rendezvous and Gloo collectives;
// returns each rank's result. Rethrows the first rank's exception.
template <class Body>
std::vector<std::vector<float>> run_gloo_ranks(int world, const Body& body) {
  const int port = test::free_tcp_port();
  std::vector<std::vector<float>> results(static_cast<size_t>(world));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        RendezvousConfig c;
        c.master_addr = "127.0.0.1";
        c.master_port = port;
        c.rank = r;
        c.world_size = world;
        c.timeout = std::chrono::milliseconds(20000);
        Rendezvous rv(c);
        // As `qsync-worker infer` runs Gloo.
        std::unique_ptr<Collectives> coll = collectives_gloo(rv, c.timeout, GlooLoopPolicy::kSchedBatch);
        results[size_t(r)] = body(*coll);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return results;
}

// Prefill of 6 tokens, then 4 decoded tokens: all logits, concatenated.
std::vector<float> prefill_then_decode(TpTransformer& m, const std::vector<int32_t>& tokens) {
  m.reset(2);
  std::vector<int32_t> first;
  for (int64_t b = 0; b < 2; ++b) first.insert(first.end(), tokens.begin() + b * 10, tokens.begin() + b * 10 + 6);
  std::vector<float> all = m.forward(first, 2);
  for (int64_t t = 6; t < 10; ++t) {
    const std::vector<float> step = m.forward({tokens[size_t(t)], tokens[size_t(10 + t)]}, 2);
    all.insert(all.end(), step.begin(), step.end());
  }
  return all;
}

TEST(TpRanks, SimulationEqualsGlooRanks) {
  TinyGpt g(31);
  const TransformerWeights w = transformer_weights_from_model(*g.model);
  const TpLayout layout = tp_layout_contiguous(w, 2);
  const std::vector<int32_t> tokens = random_tokens(20, 5);  // (2, 10)
  for (const std::vector<bool>& dropped :
       {std::vector<bool>{false, false}, std::vector<bool>{false, true}, std::vector<bool>{true, true}}) {
    TpTransformer sim = tp_simulation(w, layout);
    sim.set_dropped(dropped);
    const std::vector<float> expected = prefill_then_decode(sim, tokens);
    const auto ranks = run_gloo_ranks(2, [&](Collectives& coll) {
      TpTransformer rank = tp_rank(w, layout, coll);
      rank.set_dropped(dropped);
      return prefill_then_decode(rank, tokens);
    });
    for (int r = 0; r < 2; ++r)
      EXPECT_LT(max_abs_diff(ranks[size_t(r)], expected), RANKS_TOLERANCE)
          << "rank " << r << ", dropped " << dropped[0] << dropped[1];
    EXPECT_EQ(std::memcmp(ranks[0].data(), ranks[1].data(), ranks[0].size() * sizeof(float)), 0)
        << "the ranks disagree";
  }
}

TEST(TpRanks, RankNeedsAMatchingWorld) {
  TinyGpt g;
  const TransformerWeights w = transformer_weights_from_model(*g.model);
  std::unique_ptr<Collectives> one = collectives_local();
  EXPECT_THROW(tp_rank(w, tp_layout_contiguous(w, 2), *one), std::invalid_argument);
}

// A model file and a `train`-style checkpoint of the tiny model.
struct Trained {
  test::ScratchDir dir;
  TinyGpt g{41};
  std::string model_file, checkpoint;
  Trained() {
    model_file = dir.write("tiny.yaml", test::tiny_gpt_yaml());
    checkpoint = dir.file("latest.qckpt");
    Optimizer opt(OptimizerConfig{}, g.model->parameters(), &g.memory);
    checkpoint_save(checkpoint, *g.model, opt, CheckpointMeta{});
  }
};

// An SPD plan for the tiny model at TP 2: block 1 dropped, block 1's heads and MLP slices
// regrouped, and a weights file of its own (another initialisation of the same model).
struct PlannedRun {
  TransformerWeights weights;
  TpLayout layout;
};
PlannedRun write_plan(const Trained& t) {
  TinyGpt other(77);
  PlannedRun run{transformer_weights_from_model(*other.model), {}};
  transformer_weights_save(run.weights, t.dir.file("distilled.qtw"));
  run.layout = tp_layout_contiguous(run.weights, 2);
  run.layout.heads_of_rank[1] = {{3, 0}, {1, 2}};
  run.layout.mlp_slice_of_rank[1] = {1, 0};
  SpdPlan plan;
  plan.model = t.g.desc.name;
  plan.model_hash = t.g.desc.hash;
  plan.tp_degree = 2;
  plan.blocks = 2;
  plan.weights = "distilled.qtw";  // relative to the plan's folder
  plan.dropped = {SpdDroppedBlock{1, SpdStrategy::HEAD_GROUPED}};
  plan.heads_of_rank = run.layout.heads_of_rank;
  plan.mlp_slice_of_rank = run.layout.mlp_slice_of_rank;
  spd_plan_write(plan, t.dir.file("plan.json"));
  return run;
}

TEST(TpInferCli, TwoProcessesMatchTheSimulation) {
  Trained t;
  const TransformerWeights w = transformer_weights_from_model(*t.g.model);
  const PlannedRun planned = write_plan(t);
  const std::string prompt = "Hello, world";
  const std::vector<int32_t> tokens = char_encode(prompt);
  for (const std::string mode : {"tp", "drop", "plan"}) {
    TpTransformer sim = mode == "plan" ? tp_simulation(planned.weights, planned.layout)
                                       : tp_simulation(w, tp_layout_contiguous(w, 2));
    sim.set_dropped({false, mode != "tp"});
    sim.reset(1);
    const std::vector<float> logits = sim.forward(tokens, 1);
    const std::vector<float> expected(logits.end() - 96, logits.end());
    std::vector<std::string> spd_flags = {"--drop", mode == "tp" ? "none" : "1"};
    if (mode == "plan") spd_flags = {"--spd-plan", t.dir.file("plan.json")};
    const int port = test::free_tcp_port();
    std::vector<test::Process> ranks;
    for (int r = 0; r < 2; ++r) {
      test::SpawnOptions o;
      o.args = {QSYNC_WORKER_BIN, "infer", "--model", t.model_file, "--checkpoint", t.checkpoint, "--prompt", prompt,
                "--max-new-tokens", "3", "--logits-out", t.dir.file("logits.json"),
                "--summary-json", t.dir.file("summary.json"), "--collective-timeout", "30"};
      o.args.insert(o.args.end(), spd_flags.begin(), spd_flags.end());
      o.env = {{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", std::to_string(port)}, {"OMP_NUM_THREADS", "1"}};
      o.stdout_path = t.dir.file("out" + std::to_string(r));
      o.stderr_path = t.dir.file("err" + std::to_string(r));
      ranks.emplace_back(o);
    }
    for (auto& p : ranks) {
      const std::optional<int> code = p.wait_for(std::chrono::seconds(60));
      ASSERT_TRUE(code.has_value()) << "rank did not finish";
      ASSERT_EQ(*code, 0) << p.err();
    }
    const auto got = nlohmann::json::parse(test::read_text(t.dir.file("logits.json")));
    EXPECT_LT(max_abs_diff(got.at("logits").get<std::vector<float>>(), expected), RANKS_TOLERANCE) << mode;
    const auto summary = nlohmann::json::parse(test::read_text(t.dir.file("summary.json")));
    EXPECT_EQ(summary.at("tp_degree"), 2);
    EXPECT_EQ(summary.at("allreduces_per_token").get<double>(), mode == "tp" ? 4.0 : 3.0);
    EXPECT_EQ(summary.at("new_tokens"), 3);
    EXPECT_EQ(summary.at("collectives"), "gloo");
    EXPECT_EQ(summary.at("generated_text").get<std::string>().size(), 3u);
    EXPECT_NE(ranks[0].out().find(prompt), std::string::npos) << "rank 0 prints the text";
    EXPECT_EQ(ranks[1].out(), "") << "only rank 0 prints";
  }
}

// Runs `qsync-worker infer FLAGS` as one process (a single-rank world unless the flags say
// otherwise); returns its stderr when it fails, "(no error)" when it succeeds.
std::string infer_error(const test::ScratchDir& dir, const std::vector<std::string>& flags) {
  test::SpawnOptions o;
  o.args = {QSYNC_WORKER_BIN, "infer"};
  o.args.insert(o.args.end(), flags.begin(), flags.end());
  o.env = {{"OMP_NUM_THREADS", "1"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}};
  o.stdout_path = dir.file("cli.out");
  o.stderr_path = dir.file("cli.err");
  test::Process p(o);
  const std::optional<int> code = p.wait_for(std::chrono::seconds(60));
  if (!code.has_value()) return "(did not finish)";
  if (*code == 0) return "(no error)";
  return p.err();
}

TEST(TpInferCli, BadInputIsRefusedClearly) {
  Trained t;
  const std::vector<std::string> base = {"--model", t.model_file, "--checkpoint", t.checkpoint, "--quiet",
                                         "--rank", "0", "--world-size", "1", "--prompt", "abc"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto expect_refused = [&](const std::vector<std::string>& flags, const std::string& phrase) {
    const std::string err = infer_error(t.dir, flags);
    EXPECT_NE(err.find(phrase), std::string::npos) << "expected '" << phrase << "', got: " << err;
  };
  // Everything is checked before the rendezvous: a 3-rank world is never joined.
  expect_refused(with({"--world-size", "3", "--tp", "3"}), "TP degree 3 does not divide block 0's 4 heads");
  expect_refused(with({"--tp", "2"}), "--tp 2 must equal WORLD_SIZE 1");
  expect_refused({"--model", t.model_file, "--checkpoint", t.dir.file("none.qckpt"), "--prompt", "a"},
                 "none.qckpt does not exist");
  expect_refused(with({"--prompt", std::string(17, 'a')}), "longer than the model's context of 16");
  expect_refused(with({"--drop", "2"}), "not a block index in 0..1");

  SpdPlan plan;
  plan.model = "char-gpt";
  plan.model_hash = model_desc_find("char-gpt").hash;
  plan.tp_degree = 1;
  plan.blocks = 4;
  spd_plan_write(plan, t.dir.file("plan.json"));
  const std::string err = infer_error(t.dir, with({"--spd-plan", t.dir.file("plan.json")}));
  EXPECT_NE(err.find("char-gpt"), std::string::npos) << err;
  EXPECT_NE(err.find("tiny-gpt"), std::string::npos) << err;

  // The same flags succeed on a good input: greedy text of 2 tokens, every block SPD.
  EXPECT_EQ(infer_error(t.dir, with({"--max-new-tokens", "2", "--drop", "all", "--summary-json", t.dir.file("s.json")})),
            "(no error)");
  const auto summary = nlohmann::json::parse(test::read_text(t.dir.file("s.json")));
  EXPECT_EQ(summary.at("new_tokens"), 2);
  EXPECT_EQ(summary.at("dropped_blocks"), nlohmann::json::array({0, 1}));
  EXPECT_EQ(summary.at("allreduces_per_token").get<double>(), 2.0);
}

// --eval scores the evaluation windows of the text's validation split (every other window, the
// rest being spd-plan's calibration windows), --eval-windows of them spread over the split: the
// simulation's tp_evaluate on the same windows is the oracle.
TEST(TpInferCli, EvalScoresTheValidationSplitsEvaluationWindows) {
  Trained t;
  std::string text;
  for (int i = 0; i < 4000; ++i) text += "the quick brown fox jumps over the lazy dog. "[size_t(i * 7 % 45)];
  const std::string corpus = t.dir.write("corpus.txt", text);
  const std::vector<std::string> flags = {"--model", t.model_file, "--checkpoint", t.checkpoint, "--quiet",
                                          "--rank", "0", "--world-size", "1", "--prompt", "abc", "--max-new-tokens",
                                          "1", "--eval", corpus, "--eval-windows", "5",
                                          "--summary-json", t.dir.file("eval.json")};
  ASSERT_EQ(infer_error(t.dir, flags), "(no error)");
  const auto summary = nlohmann::json::parse(test::read_text(t.dir.file("eval.json")));

  const TransformerWeights w = transformer_weights_from_model(*t.g.model);
  TpTransformer sim = tp_simulation(w, tp_layout_contiguous(w, 1));
  const int64_t T = w.max_tokens;
  const HeldOutWindows h = char_heldout_windows(char_corpus_load(corpus, T, 0.1).validation, T);
  ASSERT_GT(h.evaluation.size(), size_t(5 * (T + 1)));  // 5 of more: the spread is exercised
  const TpQuality q = tp_evaluate(sim, char_windows_spread(h.evaluation, T, 5), T, 0, 8, h.stride());
  const auto& eval = summary.at("eval");
  EXPECT_EQ(eval.at("positions"), 5 * T);
  // The worker may pick another GEMM kernel (its device class and threads): float rounding of the
  // logits, well under 1e-4 of the perplexity; at most one near-tie argmax may flip.
  EXPECT_NEAR(eval.at("perplexity").get<double>(), q.perplexity, 1e-4 * q.perplexity);
  EXPECT_NEAR(eval.at("accuracy").get<double>(), q.accuracy, 1.5 / double(5 * T));
}

}  // namespace
}  // namespace qsync
