// File: bench/allreduce_bench.cpp
// qsync-bench-allreduce: latency and bandwidth of the Gloo all-reduce (sum of FP32) versus message
// size, between N local ranks over loopback TCP (forked processes). Not a test: medians of
// repeated calls. Bus bandwidth = bytes * 2(N-1)/N / time, the ring's per-link traffic.
// --comm-profile FILE writes the planner's communication profile (planner/device_profile.h):
// seconds = alpha + beta * bytes fitted to relative errors (fit_linear_cost_relative) over the medians,
// with the ranks arriving together; then the same sizes from 64 KiB up on the last rank to arrive,
// its peers idle in the call for twice the time together, fitted likewise (late_alpha,
// late_beta: the replayer's cost of a straggler's all-reduce), and a small one (late_sync_seconds).
// --link SPEC (worker/dist/link_model.h, e.g. 50us,10GB/s) also times every size through a second
// Gloo instance wrapped in the slow-link emulation, so the table shows the emulated link beside
// loopback (and the model's own figure); the comm profile is then fitted to the emulated column.
// --gloo-loop idle|batch: the policy of Gloo's event-loop thread (worker/dist/collectives.h), as
// the profile's users run it: idle (default) as training does, batch as tensor-parallel inference.
//
//   build/bin/qsync-bench-allreduce [--ranks 2] [--reps 20] [--max-mib 64] [--json FILE]
//                                   [--comm-profile FILE] [--link 50us,10GB/s] [--gloo-loop idle]
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/device_profile.h"
#include "worker/dist/collectives.h"
#include "runner/cpu_pinning.h"
#include "worker/dist/link_model.h"

namespace {

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Median seconds of `reps` all-reduces of `data` (after one warm-up), each started after a barrier.
double median_all_reduce_seconds(qsync::Collectives& coll, std::vector<float>& data, int reps) {
  coll.all_reduce_sum(data.data(), int64_t(data.size()));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    coll.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    coll.all_reduce_sum(data.data(), int64_t(data.size()));
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Median seconds of an all-reduce of `floats` values on the rank that arrives last, after its
// peers have idled in the call for `skew` (it computes meanwhile). Small: the wake-up latency of a
// synchronization point whose participants arrive apart, as a training step's do (its idle peers
// must be woken). Before Gloo's event-loop thread left SCHED_OTHER
// (worker/dist/collectives_gloo.cpp) this cost 4.9 ms on 2 pinned ranks, a scheduler tick of the
// loop thread spinning; now about 0.1-0.2 ms. Large: less than together, the peers having sent
// their parts meanwhile. The late rank rotates every call.
double median_late_arrival_seconds(qsync::Collectives& coll, int rank, int ranks, int64_t floats,
                                   std::chrono::microseconds skew, int reps) {
  std::vector<float> data(size_t(floats), 1.0f);
  std::vector<double> t;
  for (int r = 0; r < reps * ranks; ++r) {
    coll.barrier();
    const bool late = r % ranks == rank;
    if (late) {  // busy, as compute is: this CPU stays awake while the peers' CPUs idle
      const auto until = std::chrono::steady_clock::now() + skew;
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    coll.all_reduce_sum(data.data(), int64_t(data.size()));
    if (late) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The smallest all-reduce whose cost on a late arrival is measured for CommProfile::late_alpha
// and late_beta (below it the wake-up latency, late_sync_seconds, is what counts).
constexpr int64_t LATE_MIN_BYTES = 64 << 10;

double bus_gbps(int64_t bytes, int ranks, double seconds) { return double(bytes) * 2.0 * (ranks - 1) / ranks / seconds * 1e-9; }

// One rank: every size, `reps` timed all-reduces after a warm-up, over loopback and (with an
// enabled link) through the emulated link; rank 0 writes the rows.
int run_rank(int rank, int ranks, int port, int reps, int64_t max_bytes, const qsync::LinkModel& link,
             qsync::GlooLoopPolicy loop, const std::string& out_path) {
  qsync::RendezvousConfig rc;
  rc.master_addr = "127.0.0.1";
  rc.master_port = port;
  rc.rank = rank;
  rc.world_size = ranks;
  rc.timeout = std::chrono::milliseconds(30000);
  qsync::Rendezvous rv(rc);
  auto coll = qsync::collectives_gloo(rv, rc.timeout, loop);
  std::unique_ptr<qsync::Collectives> linked;
  if (link.enabled()) linked = qsync::collectives_with_link(qsync::collectives_gloo(rv, rc.timeout, loop), link);
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t bytes = 4; bytes <= max_bytes; bytes *= 4) {
    std::vector<float> data(size_t(bytes / 4), 1.0f);
    const double med = median_all_reduce_seconds(*coll, data, reps);
    nlohmann::json row = {{"bytes", bytes}, {"median_seconds", med}, {"algbw_gbps", double(bytes) / med * 1e-9},
                          {"busbw_gbps", bus_gbps(bytes, ranks, med)}};
    if (linked) {
      const double with_link = median_all_reduce_seconds(*linked, data, reps);
      row["link_median_seconds"] = with_link;
      row["link_busbw_gbps"] = bus_gbps(bytes, ranks, with_link);
      row["link_model_seconds"] = qsync::link_all_reduce_seconds(link, bytes, ranks);
    }
    rows.push_back(row);
  }
  // The cost of a synchronization point whose ranks arrive apart (the ranks' medians, averaged).
  auto mean_over_ranks = [&](double v) {
    coll->all_reduce_sum(&v, 1);
    return v / ranks;
  };
  const double late_sync =
      mean_over_ranks(median_late_arrival_seconds(*coll, rank, ranks, 8, std::chrono::milliseconds(3), reps));
  // From 64 KiB up (over loopback only), each size after its peers idled for twice its time
  // together, at least 3 ms: long enough for them to send what they can before the last arrives.
  nlohmann::json late_rows = nlohmann::json::array();
  for (const auto& row : rows) {
    const int64_t bytes = row["bytes"].get<int64_t>();
    if (bytes < LATE_MIN_BYTES || link.enabled()) continue;
    const auto skew = std::max<std::chrono::microseconds>(
        std::chrono::milliseconds(3), std::chrono::microseconds(int64_t(2e6 * row["median_seconds"].get<double>())));
    const double late = mean_over_ranks(median_late_arrival_seconds(*coll, rank, ranks, bytes / 4, skew, reps));
    late_rows.push_back({{"bytes", bytes}, {"median_seconds", late}});
  }
  if (rank == 0)
    std::ofstream(out_path + ".late") << nlohmann::json{{"late_sync_seconds", late_sync}, {"rows", late_rows}}.dump();
  if (rank == 0) std::ofstream(out_path) << rows.dump();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 2, reps = 20;
  int64_t max_mib = 64;
  std::string json_path, comm_path;
  qsync::LinkModel link;
  qsync::GlooLoopPolicy loop = qsync::GlooLoopPolicy::kSchedIdle;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc && a != "--help") {
      std::fprintf(stderr, "qsync-bench-allreduce: %s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--ranks") ranks = std::stoi(argv[++i]);
    else if (a == "--reps") reps = std::stoi(argv[++i]);
    else if (a == "--max-mib") max_mib = std::stoll(argv[++i]);
    else if (a == "--json") json_path = argv[++i];
    else if (a == "--comm-profile") comm_path = argv[++i];
    else if (a == "--gloo-loop") {
      const std::string v = argv[++i];
      if (v != "idle" && v != "batch") {
        std::fprintf(stderr, "qsync-bench-allreduce: --gloo-loop %s: use idle (as training runs Gloo) or batch "
                     "(as tensor-parallel inference does)\n", v.c_str());
        return 2;
      }
      loop = v == "idle" ? qsync::GlooLoopPolicy::kSchedIdle : qsync::GlooLoopPolicy::kSchedBatch;
    }
    else if (a == "--link") {
      try {
        link = qsync::link_model_parse(argv[++i]);
      } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "qsync-bench-allreduce: %s\n", e.what());
        return 2;
      }
    } else {
      std::printf("usage: qsync-bench-allreduce [--ranks N] [--reps N] [--max-mib M] [--json FILE] [--comm-profile FILE]\n"
                  "                             [--link LATENCY,BANDWIDTH (e.g. 50us,10GB/s)]\n"
                  "                             [--gloo-loop idle|batch]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  const int port = free_port();
  char tmp[] = "/tmp/qsync-allreduce-XXXXXX";
  const int fd = mkstemp(tmp);
  close(fd);
  // Each rank on a CPU of its own when they fit, as `qsync run` runs a job (runner/cpu_pinning.h).
  const qsync::CpuAssignment cpus = qsync::assign_rank_cpus(std::vector<int>(size_t(ranks), 1), qsync::affinity_cpus());
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      try {
        if (!cpus.per_rank.empty()) qsync::pin_to_cpus(cpus.per_rank[size_t(r)]);
        _exit(run_rank(r, ranks, port, reps, max_mib << 20, link, loop, tmp));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        _exit(1);
      }
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (!ok) {
    std::fprintf(stderr, "qsync-bench-allreduce: a rank failed\n");
    return 1;
  }
  std::ifstream in(tmp);
  const nlohmann::json rows = nlohmann::json::parse(in);
  unlink(tmp);
  const std::string late_path = std::string(tmp) + ".late";
  std::ifstream late_in(late_path);
  const nlohmann::json late = nlohmann::json::parse(late_in);
  unlink(late_path.c_str());
  std::printf("Gloo all-reduce (sum, fp32), %d ranks over loopback TCP, event loop %s, median of %d\n", ranks,
              qsync::gloo_loop_policy_name(loop), reps);
  if (link.enabled()) {
    std::printf("link: emulated %s (model: 2(N-1) latency + 2(N-1)/N bytes / bandwidth) beside loopback\n",
                link.describe().c_str());
    std::printf("%12s %12s %12s %12s %12s %12s %12s\n", "bytes", "time us", "algbw GB/s", "busbw GB/s", "link us",
                "model us", "link busbw");
  } else {
    std::printf("%12s %12s %12s %12s\n", "bytes", "time us", "algbw GB/s", "busbw GB/s");
  }
  for (const auto& r : rows) {
    std::printf("%12lld %12.1f %12.3f %12.3f", (long long)r["bytes"].get<int64_t>(),
                r["median_seconds"].get<double>() * 1e6, r["algbw_gbps"].get<double>(), r["busbw_gbps"].get<double>());
    if (link.enabled()) {
      std::printf(" %12.1f %12.1f %12.3f", r["link_median_seconds"].get<double>() * 1e6,
                  r["link_model_seconds"].get<double>() * 1e6, r["link_busbw_gbps"].get<double>());
    }
    std::printf("\n");
  }
  std::printf("ranks arriving apart (%s): a small all-reduce costs the last rank %.1f us after its peers idled 3 ms\n",
              cpus.per_rank.empty() ? "not pinned" : "each rank on a CPU of its own", late["late_sync_seconds"].get<double>() * 1e6);
  std::vector<int64_t> late_bytes;
  std::vector<double> late_seconds;
  for (const auto& r : late["rows"]) {
    late_bytes.push_back(r["bytes"].get<int64_t>());
    late_seconds.push_back(r["median_seconds"].get<double>());
    std::printf("  %12lld bytes: %9.1f us on the last rank, its peers idle for twice the time together\n",
                (long long)late_bytes.back(), late_seconds.back() * 1e6);
  }
  if (!json_path.empty()) {
    std::ofstream(json_path) << nlohmann::json{{"ranks", ranks}, {"link", link.describe()}, {"rows", rows}}.dump(2)
                             << "\n";
  }
  if (!comm_path.empty()) {
    std::vector<int64_t> bytes;
    std::vector<double> seconds;
    for (const auto& r : rows) {
      bytes.push_back(r["bytes"].get<int64_t>());
      seconds.push_back(r[link.enabled() ? "link_median_seconds" : "median_seconds"].get<double>());
    }
    const qsync::LinearCost fit = qsync::fit_linear_cost_relative(bytes, seconds);
    qsync::CommProfile c;
    c.world_size = ranks;
    c.alpha = fit.b;
    c.beta = fit.a;
    c.late_sync_seconds = late["late_sync_seconds"].get<double>();
    if (late_bytes.size() >= 2) {
      const qsync::LinearCost late_fit = qsync::fit_linear_cost_relative(late_bytes, late_seconds);
      c.late_alpha = std::max(0.0, late_fit.b);
      c.late_beta = std::max(0.0, late_fit.a);
    }
    c.source = "measured: Gloo all-reduce (sum, fp32) of " + std::to_string(ranks) +
               " ranks over loopback TCP, event loop " + qsync::gloo_loop_policy_name(loop) +
               (link.enabled() ? " through the emulated link " + link.describe() : std::string()) + ", median of " + std::to_string(reps) + " per size, 4 B to " +
               std::to_string(max_mib) + " MiB, least squares of relative errors" +
               (c.late_beta > 0 ? "; on a late arrival from 64 KiB up likewise" : "");
    qsync::comm_profile_write(comm_path, c);
    std::printf("comm profile: alpha %.1f us, beta %.3f ns/byte (%.2f GB/s); a late arrival: alpha %.1f us, beta "
                "%.3f ns/byte -> %s\n",
                c.alpha * 1e6, c.beta * 1e9, c.beta > 0 ? 1e-9 / c.beta : 0.0, c.late_alpha * 1e6, c.late_beta * 1e9,
                comm_path.c_str());
  }
  return 0;
}
