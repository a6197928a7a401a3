// File: tests/fuzz/fuzz_seeds_main.cpp
// qsync-fuzz-seeds OUT: writes the seed corpora the fuzz targets start from, OUT/seeds/<target>/,
// with the project's own writers (plan files, profiles, calibration stats, SPD plans,
// checkpoints; the k8s examples as JSON) so the seeds follow the formats as they change, plus
// hand-written protocol samples; and creates OUT/corpus/<target>/ (where libFuzzer adds what it
// finds) and OUT/artifacts/. The job and model targets also read examples/ directly.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/device_class.h"
#include "planner/device_profile.h"
#include "planner/indicator.h"
#include "planner/job_spec.h"
#include "planner/model_desc.h"
#include "planner/plan_file.h"
#include "planner/spd_plan.h"
#include "worker/checkpoint.h"
#include "worker/dist/kv_protocol.h"

namespace fs = std::filesystem;
using namespace qsync;

namespace {

fs::path g_out;

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_out / "seeds" / target;
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary | std::ios::trunc) << bytes;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void planner_seeds() {
  const ModelDesc mlp = model_desc_load(QSYNC_FUZZ_MODELS_DIR "/mlp.yaml");
  const ModelDesc cnn = model_desc_load(QSYNC_FUZZ_MODELS_DIR "/cnn.yaml");
  RankPlan p = plan_uniform(mlp, LayerPrecision::INT8);
  p.rank = 1;
  p.device_class = "cpu-avx2";
  p.local_batch = 64;
  p.predicted_step_seconds = 0.08;
  p.model_hash = mlp.hash;
  seed("plan_file", "mlp-int8", std::string(1, '\0') + plan_to_yaml(p));
  RankPlan c = plan_uniform(cnn, LayerPrecision::FP32);
  const auto gemms = model_gemm_layers(cnn);
  if (!gemms.empty()) c.layers[gemms.front()->name] = LayerPrecision::BF16;
  seed("plan_file", "cnn-mixed", std::string(1, '\1') + plan_to_yaml(c));

  const std::string gpu = estimated_gpu_classes().front();
  seed("device_profile", "mlp-" + gpu, device_profile_to_json(device_profile_estimate(mlp, gpu, 32)));
  const fs::path comm = g_out / "seeds" / "device_profile" / "comm4.json";
  fs::create_directories(comm.parent_path());
  comm_profile_write(comm.string(), comm_profile_estimate(4));

  CalibrationStats s;
  s.model = mlp.name;
  s.model_hash = mlp.hash;
  s.steps = 4;
  s.batch = 32;
  int depth = 0;
  for (const LayerDesc* l : model_gemm_layers(mlp)) {
    LayerStats ls;
    ls.layer = l->name;
    ls.depth = depth++;
    ls.x_scale = 0.02;
    ls.w_scale = 0.001;
    ls.x_norm = 30;
    ls.w_norm = 12;
    ls.gw_norm = 0.5;
    ls.x_numel = 784 * 32;
    ls.w_numel = 1024 * 784;
    ls.y_numel = 1024 * 32;
    ls.w_quant_error = 0.01;
    ls.dy_scale = 1e-5;
    ls.dy_norm = 0.1;
    ls.w_error_fp16 = 1e-4;
    ls.w_error_bf16 = 1e-3;
    ls.w_error_fp8 = 0.03;
    s.layers.push_back(ls);
  }
  seed("calibration_stats", "mlp", calibration_stats_to_json(s));

  SpdPlan plan;
  plan.model = "char-gpt";
  plan.model_hash = 0x1234;
  plan.tp_degree = 2;
  plan.blocks = 4;
  plan.tau1 = 0.01;
  plan.tau2 = 0.1;
  for (int64_t b = 0; b < 4; ++b) plan.sensitivity.push_back({b, 0.01 * double(b), 0.02 * double(b), spd_classify(0.01 * double(b), 0.01, 0.1)});
  plan.dropped.push_back({0, SpdStrategy::ZERO_SHOT});
  plan.dropped.push_back({1, SpdStrategy::HEAD_GROUPED});
  plan.heads_of_rank = {{{0, 1}, {2, 3}}, {{0, 2}, {1, 3}}, {}, {}};
  plan.mlp_slice_of_rank = {{0, 1}, {1, 0}, {}, {}};
  const fs::path spd = g_out / "seeds" / "spd_plan" / "char-gpt-tp2.json";
  fs::create_directories(spd.parent_path());
  spd_plan_write(plan, spd.string());

  for (const char* dir : {QSYNC_FUZZ_EXAMPLES_DIR "/k8s", QSYNC_FUZZ_EXAMPLES_DIR "/jobs"}) {
    for (const auto& f : fs::directory_iterator(dir)) {
      try {
        seed("hybrid_training_job", f.path().stem().string() + ".json", job_yaml_to_json(read_file(f.path())).dump(1));
      } catch (const std::exception& e) {
        std::cerr << "qsync-fuzz-seeds: skipping " << f.path() << ": " << e.what() << "\n";
      }
    }
  }

  const std::vector<std::pair<std::string, std::string>> numbers = {
      {"int", std::string(1, '\0') + "64"},       {"int-negative", std::string(1, '\0') + "-3"},
      {"double", std::string(1, '\1') + "1e-3"},  {"duration", std::string(1, '\2') + "1.5s"},
      {"duration-ms", std::string(1, '\2') + "250ms"}, {"memory", std::string(1, '\3') + "2Gi"},
      {"memory-plain", std::string(1, '\3') + "1000000"}, {"budget", std::string(1, '\4') + "ppl:1%"},
      {"budget-acc", std::string(1, '\4') + "acc:0.005"}, {"strategy", std::string(1, '\5') + "head-grouped"}};
  for (const auto& [name, bytes] : numbers) seed("cli_number", name, bytes);
}

void checkpoint_seeds() {
  device_class_activate(device_class_fallback(device_class_by_name("cpu-avx2")), 1);
  const ModelDesc tiny = model_desc_load(QSYNC_FUZZ_TINY_MODEL);
  for (OptimizerKind kind : {OptimizerKind::ADAMW, OptimizerKind::SGD}) {
    MemoryAccount memory;
    Model model(tiny, &memory, 1);
    OptimizerConfig config;
    config.kind = kind;
    Optimizer opt(config, model.parameters(), &memory);
    const fs::path path = g_out / "checkpoint.tmp";
    checkpoint_save(path.string(), model, opt, {4, 0, 4, 1, tiny.hash, {}});
    const std::string name = optimizer_kind_name(kind);
    seed("checkpoint", name, std::string(1, '\0') + read_file(path));
    seed("checkpoint", name + "-fix-checksum", std::string(1, '\1') + read_file(path));
    fs::remove(path);
  }
}

void protocol_seeds() {
  seed("kube_config", "token",
       "apiVersion: v1\nkind: Config\ncurrent-context: local\n"
       "clusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:6443', certificate-authority-data: aGVsbG8=}\n"
       "users:\n- name: u\n  user: {token: abc, client-certificate-data: aGVsbG8=, client-key-data: aGVsbG8=}\n"
       "contexts:\n- name: local\n  context: {cluster: c, user: u, namespace: jobs}\n");
  seed("kube_config", "insecure",
       "apiVersion: v1\nkind: Config\ncurrent-context: a\nclusters:\n- name: c\n  cluster:\n    server: http://localhost:8080\n"
       "    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    tokenFile: /nonexistent/token\n"
       "contexts:\n- name: a\n  context:\n    cluster: c\n    user: u\n");
  seed("http_request", "get", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  seed("http_request", "watch-query", "GET /api/v1/namespaces/a%20b/pods?watch=1&labelSelector=app%3Dq HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\nGET /metrics HTTP/1.0\r\n\r\n");
  seed("http_request", "post-length", "POST /apis/x HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\nContent-Type: application/json\r\n\r\n{\"a\":1}");
  seed("http_request", "post-chunked", "PATCH /apis/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3;x=y\r\n:1}\r\n0\r\n\r\n");
  seed("kube_watch_event", "events",
       std::string("\x00\xc8", 2) +
           "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"resourceVersion\":\"12\"}}}\n"
           "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"13\"}}}\n\n"
           "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,\"reason\":\"Expired\",\"message\":\"too old\"}}\n");
  seed("kube_watch_event", "status-409",
       std::string("\x01\x99", 2) + "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"reason\":\"Conflict\",\"code\":409,\"message\":\"the object has been modified\"}");
  kv::Writer w;
  w.u8(kv::kSet).str("rank0/addr").str("127.0.0.1:1234");
  w.u8(kv::kGet).str("rank0/addr").i64(10);
  w.u8(kv::kAdd).str("barrier/0").i64(1);
  w.u8(kv::kAdd).str("barrier/0").i64(3);
  w.u8(kv::kCheck).str("barrier/0");
  w.u8(kv::kWait).u32(2).str("rank0/addr").str("barrier/0").i64(10);
  w.u8(kv::kGet).str("missing").i64(1);
  seed("kv_store", "session", std::string(w.data().begin(), w.data().end()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: qsync-fuzz-seeds OUT\n";
    return 2;
  }
  g_out = argv[1];
  try {
    planner_seeds();
    checkpoint_seeds();
    protocol_seeds();
    for (const char* t : {"job_file", "model_desc", "onnx_model"}) fs::create_directories(g_out / "seeds" / t);  // examples/, tests/golden/onnx seed them
    for (const auto& t : fs::directory_iterator(g_out / "seeds")) fs::create_directories(g_out / "corpus" / t.path().filename());
    fs::create_directories(g_out / "artifacts");
  } catch (const std::exception& e) {
    std::cerr << "qsync-fuzz-seeds: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
