// File: bench/operator_bench.cpp
// qsync-bench-operator: the operator foundation's benchmark targets (issue 6), measured against
// the Kubernetes API test server on 127.0.0.1 and driven only through the real KubeClient:
//   1. informer scale: N Pods (~1.5 KB of JSON each) listed in pages and watched; time to sync
//      and resident memory (VmRSS). With the server in this process the informer's share is RSS
//      after the sync minus RSS before the informer started; with the qsync-kube-test-server
//      binary (beside this one, or --server-binary) a child process runs the informer alone and
//      reports its whole RSS. Target: under 200 MiB.
//   2. event latency: while the informer watches, a writer merge-patches a label of the Pods at
//      a fixed rate; a write's latency runs from just before its request until the informer's
//      handler has queued that key (at that resourceVersion) in a work queue. Target: p99 under
//      50 ms, no event missed.
//   3. reconcile throughput: M ConfigMaps, a synced informer, a Controller with a no-op
//      reconcile reading the informer's cache; time until every key was reconciled once, with 4
//      workers (target: under 5 s) and with 1.
// Not a test: prints a table with each target and PASS/MISS; --json FILE writes the figures.
//
//   build/bin/qsync-bench-operator [--pods 10000] [--rate 500] [--seconds 10] [--objects 1000]
//                                  [--page-size 500] [--server-binary PATH] [--json FILE]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/operator_bench_fixtures.h"
#include "bench/operator_bench_phases.h"
#include "tests/kube_api_server/api_server.h"

namespace {

using nlohmann::json;
using namespace qsync::operator_bench;

constexpr double kRssTargetMib = 200, kLatencyTargetMs = 50, kReconcileTargetSeconds = 5;

struct Flags {
  int pods = 10000, rate = 500, seconds = 10, objects = 1000;
  int64_t page_size = 500;  // InformerOptions' default, as client-go's
  std::string server_binary, json_path;
};

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--pods 10000] [--rate 500] [--seconds 10] [--objects 1000] [--page-size 500]\n"
               "       [--server-binary PATH] [--json FILE]\n",
               argv0);
  return 2;
}

// Runs every measurement; throws on a failure (a figure is never reported for a broken run).
json run_all(const Flags& f) {
  json report = {{"load_average_start", load_average()}, {"page_size", f.page_size}};
  {
    qsync::kube_test::ApiServer server;
    server.start("127.0.0.1", 0);
    auto client = make_client(server.url(), 0, 0);
    std::fprintf(stderr, "informer scale (in-process server): %d pods...\n", f.pods);
    InProcessInformer pods = informer_scale_in_process(*client, f.pods, f.page_size);
    report["informer_in_process"] = pods.figures;
    std::fprintf(stderr, "event latency: %d writes/s for %d s...\n", f.rate, f.seconds);
    report["event_latency"] = event_latency(*pods.informer, server.url(), f.pods, f.rate, f.seconds);
    pods.informer->stop();
    pods.informer.reset();

    std::fprintf(stderr, "reconcile throughput: %d ConfigMaps...\n", f.objects);
    create_namespace(*client, kConfigMapNamespace);
    create_objects(*client, qsync::kube::config_maps_type(), kConfigMapNamespace, f.objects, config_map_object);
    report["reconcile"] = {{"objects", f.objects},
                           {"seconds_4_workers", reconcile_throughput(*client, f.objects, 4, f.page_size)},
                           {"seconds_1_worker", reconcile_throughput(*client, f.objects, 1, f.page_size)}};
  }
  if (access(f.server_binary.c_str(), X_OK) == 0) {
    std::fprintf(stderr, "informer scale (server process %s)...\n", f.server_binary.c_str());
    report["informer_separate_process"] = informer_scale_separate(f.server_binary, f.pods, f.page_size);
  } else {
    std::fprintf(stderr, "no %s (build qsync-kube-test-server or pass --server-binary): skipping the "
                         "separate-process informer measurement\n", f.server_binary.c_str());
  }
  report["load_average_end"] = load_average();
  return report;
}

// One table row; a target of 0 means none. `ok` adds a condition beyond value < target.
void print_row(const std::string& what, double value, const char* unit, double target = 0, bool ok = true) {
  if (target <= 0) {
    std::printf("  %-55s %10.3f %-4s %14s\n", what.c_str(), value, unit, "-");
  } else {
    std::printf("  %-55s %10.3f %-4s   < %-6.0f %s\n", what.c_str(), value, unit, target,
                ok && value < target ? "PASS" : "MISS");
  }
}

void print_table(const Flags& f, const json& r) {
  const json& in = r["informer_in_process"];
  const json& lat = r["event_latency"];
  const json& rec = r["reconcile"];
  std::printf("qsync-bench-operator (load average %s -> %s)\n", r["load_average_start"].get<std::string>().c_str(),
              r["load_average_end"].get<std::string>().c_str());
  std::printf("  %-55s %15s %14s\n", "measure", "value", "target");
  print_row("informer sync, " + std::to_string(f.pods) + " pods of " + std::to_string(in["pod_json_bytes"].get<int>()) +
                " B, pages of " + std::to_string(f.page_size),
            in["sync_seconds"].get<double>(), "s");
  print_row("RSS before objects (in-process server)", in["rss_before_objects_mib"].get<double>(), "MiB");
  print_row("RSS after objects created", in["rss_after_objects_mib"].get<double>(), "MiB");
  print_row("RSS after informer synced", in["rss_after_sync_mib"].get<double>(), "MiB");
  print_row("informer share of RSS (synced - before informer)", in["informer_rss_mib"].get<double>(), "MiB",
            kRssTargetMib);
  print_row("  the same after malloc_trim (live memory)", in["informer_rss_trimmed_mib"].get<double>(), "MiB");
  if (r.contains("informer_separate_process")) {
    const json& sep = r["informer_separate_process"];
    print_row("informer process alone: sync", sep["sync_seconds"].get<double>(), "s");
    print_row("informer process alone: RSS at start", sep["rss_start_mib"].get<double>(), "MiB");
    print_row("informer process alone: RSS synced", sep["rss_synced_mib"].get<double>(), "MiB", kRssTargetMib);
    print_row("informer process alone: peak RSS (VmHWM)", sep["rss_peak_mib"].get<double>(), "MiB");
    print_row("informer process alone: RSS after malloc_trim", sep["rss_synced_trimmed_mib"].get<double>(), "MiB");
  }
  char rate[96];
  std::snprintf(rate, sizeof rate, "event latency p50 (%.0f writes/s achieved, %d missed)",
                lat["achieved_rate"].get<double>(), lat["missed"].get<int>());
  print_row(rate, lat["p50_ms"].get<double>(), "ms");
  print_row("event latency p99 (PASS also needs none missed)", lat["p99_ms"].get<double>(), "ms", kLatencyTargetMs,
            lat["missed"].get<int>() == 0);
  print_row("event latency max", lat["max_ms"].get<double>(), "ms");
  print_row("reconcile " + std::to_string(f.objects) + " objects once, 4 workers", rec["seconds_4_workers"].get<double>(),
            "s", kReconcileTargetSeconds);
  print_row("reconcile " + std::to_string(f.objects) + " objects once, 1 worker", rec["seconds_1_worker"].get<double>(),
            "s");
}

}  // namespace

int main(int argc, char** argv) {
  // The informer-only mode of informer_scale_separate: --informer-child URL PODS PAGE_SIZE.
  if (argc == 5 && std::string(argv[1]) == "--informer-child") {
    return run_informer_child(argv[2], std::atoi(argv[3]), std::atol(argv[4]));
  }
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") return usage(argv[0]), 0;
    if (i + 1 >= argc) {
      std::fprintf(stderr, "qsync-bench-operator: %s needs a value\n", a.c_str());
      return usage(argv[0]);
    }
    const std::string v = argv[++i];
    if (a == "--pods") f.pods = std::atoi(v.c_str());
    else if (a == "--rate") f.rate = std::atoi(v.c_str());
    else if (a == "--seconds") f.seconds = std::atoi(v.c_str());
    else if (a == "--objects") f.objects = std::atoi(v.c_str());
    else if (a == "--page-size") f.page_size = std::atol(v.c_str());
    else if (a == "--server-binary") f.server_binary = v;
    else if (a == "--json") f.json_path = v;
    else {
      std::fprintf(stderr, "qsync-bench-operator: unknown argument %s\n", a.c_str());
      return usage(argv[0]);
    }
  }
  if (f.pods <= 0 || f.rate <= 0 || f.seconds <= 0 || f.objects <= 0 || f.page_size < 0) {
    std::fprintf(stderr, "qsync-bench-operator: --pods, --rate, --seconds and --objects must be positive and "
                         "--page-size not negative (0: the whole list in one answer)\n");
    return 2;
  }
  try {
    if (f.server_binary.empty()) {
      const std::string self = self_path();
      f.server_binary = self.substr(0, self.rfind('/') + 1) + "qsync-kube-test-server";
    }
    const json report = run_all(f);
    print_table(f, report);
    if (!f.json_path.empty()) {
      std::ofstream out(f.json_path);
      out << report.dump(2) << "\n";
      if (!out) throw std::runtime_error("cannot write " + f.json_path);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qsync-bench-operator: %s\n", e.what());
    return 1;
  }
  return 0;
}
