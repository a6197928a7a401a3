// File: bench/gemm_bench.cpp
// qsync-bench-gemm: GFLOP/s of training-shaped GEMMs per CPU device class and precision, side by
// side with OpenBLAS sgemm. Each class runs in its own forked process (the ISA cap is
// process-wide). Not a test: timings are medians, and ratios are measured in one run.
//
//   build/bin/qsync-bench-gemm [--classes cpu-avx2,cpu-sse41] [--threads 1] [--reps 5]   (default: every CPU class)
//                              [--quick] [--json FILE]
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/gemm_bench_cases.h"
#include "kernels/device_class.h"

namespace qsync::bench {
namespace {

using nlohmann::json;

json row_to_json(const GemmRow& r) {
  return {{"class", r.device_class}, {"precision", r.precision}, {"op", r.op},     {"layer", r.layer},
          {"m", r.m},                {"n", r.n},                 {"k", r.k},       {"gflops", r.gflops},
          {"median_seconds", r.median_seconds}, {"support", r.support}, {"impl", r.impl}, {"library", r.library}};
}
GemmRow row_from_json(const json& j) {
  return {j["class"], j["precision"], j["op"], j["layer"], j["m"], j["n"], j["k"], j["median_seconds"], j["gflops"],
          j["support"], j["impl"], j["library"]};
}

// Runs `body` in a forked child that writes its rows as JSON to a temp file; returns the rows.
std::vector<GemmRow> rows_from_child(const std::function<std::vector<GemmRow>()>& body) {
  char path[] = "/tmp/qsync-bench-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) throw std::runtime_error("cannot create a temp file in /tmp");
  close(fd);
  const pid_t pid = fork();
  if (pid == 0) {
    int rc = 0;
    try {
      json rows = json::array();
      for (const GemmRow& r : body()) rows.push_back(row_to_json(r));
      std::ofstream(path) << rows.dump();
    } catch (const std::exception& e) {
      std::cerr << "error: " << e.what() << "\n";
      rc = 1;
    }
    std::fflush(nullptr);
    _exit(rc);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::vector<GemmRow> out;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    std::ifstream in(path);
    for (const json& j : json::parse(in)) out.push_back(row_from_json(j));
  }
  unlink(path);
  if (out.empty()) throw std::runtime_error("a benchmark child process failed (see its error above)");
  return out;
}

// OpenBLAS picks its kernel when the library loads (and Debian's 0.3.21 falls back to a generic
// SSE3 "Prescott" kernel on Xeons it does not know). Each class's peer runs in a re-executed
// child with OPENBLAS_CORETYPE set to the kernel of that class's ISA, unless the user set one.
const char* openblas_coretype(CpuIsa isa) {
  return isa >= CpuIsa::AVX512_BF16 ? "Cooperlake" : isa >= CpuIsa::AVX512 ? "SkylakeX" : "Haswell";
}

std::vector<GemmRow> openblas_rows(const DeviceClass& c, int reps, bool quick) {
  char path[] = "/tmp/qsync-bench-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) throw std::runtime_error("cannot create a temp file in /tmp");
  close(fd);
  const pid_t pid = fork();
  if (pid == 0) {
    if (std::getenv("OPENBLAS_CORETYPE") == nullptr)
      setenv("OPENBLAS_CORETYPE", openblas_coretype(std::min(c.cpu_isa_cap, cpu_isa_detected())), 1);
    const std::string reps_s = std::to_string(reps);
    std::vector<const char*> args = {"/proc/self/exe", "--openblas-child", path, "--classes", c.name.c_str(),
                                     "--reps", reps_s.c_str()};
    if (quick) args.push_back("--quick");
    args.push_back(nullptr);
    execv("/proc/self/exe", const_cast<char* const*>(args.data()));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::vector<GemmRow> out;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    std::ifstream in(path);
    for (const json& j : json::parse(in)) out.push_back(row_from_json(j));
  }
  unlink(path);
  if (out.empty()) throw std::runtime_error("the OpenBLAS benchmark child failed");
  return out;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

void print_table(const std::vector<GemmRow>& rows) {
  const std::vector<std::string> precisions = {"fp32", "bf16", "fp16", "int8", "fp8-e4m3"};
  // (class, layer, op) -> precision -> row
  std::map<std::tuple<std::string, std::string, std::string>, std::map<std::string, const GemmRow*>> cells;
  std::map<std::tuple<std::string, std::string, std::string>, const GemmRow*> openblas;  // (class, layer, op)
  std::vector<std::tuple<std::string, std::string, std::string>> order;
  for (const GemmRow& r : rows) {
    if (r.op == "quantize") continue;
    if (r.library == "openblas") {
      openblas[{r.device_class, r.layer, r.op}] = &r;
      continue;
    }
    const auto key = std::make_tuple(r.device_class, r.layer, r.op);
    if (cells.find(key) == cells.end()) order.push_back(key);
    cells[key][r.precision] = &r;
  }
  std::printf("GFLOP/s (GOP/s for int8), median; * = emulated (decoded to fp32), - = unsupported\n");
  std::printf("%-11s %-7s %-12s %6s %6s %6s |", "class", "layer", "op", "m", "n", "k");
  for (const auto& p : precisions) std::printf(" %9s", p.c_str());
  std::printf(" | %9s\n", "openblas");
  for (const auto& key : order) {
    const auto& cell = cells[key];
    const GemmRow* any = cell.begin()->second;
    std::printf("%-11s %-7s %-12s %6ld %6ld %6ld |", std::get<0>(key).c_str(), std::get<1>(key).c_str(),
                std::get<2>(key).c_str(), any->m, any->n, any->k);
    for (const auto& p : precisions) {
      auto it = cell.find(p);
      if (it == cell.end()) {
        std::printf(" %9s", "-");
      } else {
        std::printf(" %8.1f%s", it->second->gflops, it->second->support == "emulated" ? "*" : " ");
      }
    }
    auto ob = openblas.find(key);
    if (ob != openblas.end()) std::printf(" | %9.1f", ob->second->gflops);
    std::printf("\n");
  }
  std::set<std::pair<std::string, std::string>> kernels;
  for (const auto& [key, r] : openblas) kernels.insert({std::get<0>(key), r->impl});
  for (const auto& [cls, impl] : kernels) std::printf("openblas peer of %s: %s, 1 thread\n", cls.c_str(), impl.c_str());
}

// The targets, as ratios measured in this run.
json print_ratios(const std::vector<GemmRow>& rows) {
  auto find = [&](const std::string& cls, const std::string& prec, const std::string& layer, const std::string& op,
                  const std::string& library = "qsync") -> const GemmRow* {
    for (const GemmRow& r : rows)
      if (r.device_class == cls && r.precision == prec && r.layer == layer && r.op == op && r.library == library)
        return &r;
    return nullptr;
  };
  json ratios = json::array();
  std::set<std::string> classes;
  for (const GemmRow& r : rows)
    classes.insert(r.device_class);
  std::printf("\nRatios on the 'square' layer (forward GEMM), same run:\n");
  for (const std::string& cls : classes) {
    const GemmRow* blas = find(cls, "fp32", "square", "forward", "openblas");
    const GemmRow* f32 = find(cls, "fp32", "square", "forward");
    if (f32 == nullptr) continue;
    auto report = [&](const std::string& what, double v) {
      std::printf("  %-11s %-34s %6.2fx\n", cls.c_str(), what.c_str(), v);
      ratios.push_back({{"class", cls}, {"ratio", what}, {"value", v}});
    };
    if (blas) report("fp32 cpu / openblas sgemm", f32->gflops / blas->gflops);
    for (const char* p : {"int8", "bf16", "fp16"})
      if (const GemmRow* r = find(cls, p, "square", "forward"))
        report(std::string(p) + " / fp32" + (r->support == "emulated" ? " (emulated)" : ""), r->gflops / f32->gflops);
    const GemmRow* q = find(cls, "int8", "square", "quantize");
    const GemmRow* i8 = find(cls, "int8", "square", "forward");
    if (q && i8) report("int8 quantize overhead / int8 gemm", q->median_seconds / i8->median_seconds);
  }
  return ratios;
}

int bench_main(int argc, char** argv) {
  std::vector<std::string> classes;  // default: every CPU class of the table (the ones the CPU lacks fall back)
  for (const DeviceClass& c : device_classes())
    if (c.kind == DeviceKind::CPU) classes.push_back(c.name);
  int threads = 1, reps = 5;
  bool quick = false;
  std::string json_path, openblas_child;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--classes") classes = split_commas(value());
    else if (a == "--threads") threads = std::stoi(value());
    else if (a == "--reps") reps = std::stoi(value());
    else if (a == "--quick") quick = true;
    else if (a == "--json") json_path = value();
    else if (a == "--openblas-child") openblas_child = value();
    else if (a == "--help" || a == "-h") {
      std::printf("usage: qsync-bench-gemm [--classes a,b] [--threads N] [--reps N] [--quick] [--json FILE]\n");
      return 0;
    } else {
      throw std::invalid_argument("unknown argument '" + a + "' (see --help)");
    }
  }
  if (!openblas_child.empty()) {  // the re-executed OpenBLAS peer (see openblas_rows)
    json rows = json::array();
    for (const GemmRow& r : bench_run_openblas(classes.at(0), reps, quick)) rows.push_back(row_to_json(r));
    std::ofstream(openblas_child) << rows.dump();
    return 0;
  }
  std::printf("qsync-bench-gemm: CPU offers %s; %d thread(s), median of %d\n", cpu_isa_name(cpu_isa_detected()),
              threads, reps);
  json notes = json::array();
  std::vector<GemmRow> rows;
  std::set<std::string> done;
  for (const std::string& name : classes) {
    const DeviceClass& requested = device_class_by_name(name);
    if (requested.kind != DeviceKind::CPU) continue;
    const DeviceAvailability av = device_class_availability(requested);
    const DeviceClass& c = device_class_fallback(requested);
    if (!av.available) {
      std::printf("note: %s\n", av.note.c_str());
      notes.push_back(av.note);
    }
    if (!done.insert(c.name).second) continue;
    std::fflush(stdout);
    for (GemmRow& r : rows_from_child([&] {
           device_class_activate(c, threads);
           return bench_run_class(c.name, reps, quick);
         }))
      rows.push_back(std::move(r));
    for (GemmRow& r : openblas_rows(c, reps, quick)) rows.push_back(std::move(r));
  }

  print_table(rows);
  const json ratios = print_ratios(rows);
  if (!json_path.empty()) {
    json out = {{"cpu_isa", cpu_isa_name(cpu_isa_detected())}, {"threads", threads}, {"reps", reps},
                {"notes", notes}, {"ratios", ratios}, {"rows", json::array()}};
    for (const GemmRow& r : rows) out["rows"].push_back(row_to_json(r));
    std::ofstream(json_path) << out.dump(2) << "\n";
    std::printf("wrote %s\n", json_path.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace qsync::bench

int main(int argc, char** argv) {
  try {
    return qsync::bench::bench_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qsync-bench-gemm: %s\n", e.what());
    return 2;
  }
}
