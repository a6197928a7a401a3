// File: tests/worker/dist/forked_ranks.h
// Runs a test body as the ranks of a Gloo world, each rank a forked process on 127.0.0.1 (the
// rendezvous on a free port, retried when the port got taken), and collects each rank's exit code
// and message. Used by the collectives and the running-statistics tests.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/worker/dist/dist_test_support.h"
#include "worker/dist/collectives.h"

namespace qsync::test {

using std::chrono::milliseconds;

// Thrown inside a rank to report a wrong result.
struct Mismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void expect(bool ok, const std::string& what) {
  if (!ok) throw Mismatch(what);
}

struct RankResult {
  int exit_code = -1;
  std::string message;
};

using RankBody = std::function<void(int rank, Rendezvous&, Collectives&)>;

// Forks `world_size` ranks; each joins the rendezvous, connects Gloo with `timeout` (its event
// loop on `loop`: training's by default) and runs `body`. Exit code 0: body returned; 2: body
// threw Mismatch; 3: CollectiveError; 4: other error.
// A rank still running after `limit` is killed (exit code -SIGKILL). Retries if the port got taken.
inline std::vector<RankResult> run_ranks(int world_size, milliseconds timeout, const RankBody& body,
                                  milliseconds limit = milliseconds(20000),
                                  GlooLoopPolicy loop = GlooLoopPolicy::kSchedIdle) {
  std::vector<RankResult> results;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int port = free_port();
    std::vector<pid_t> pids;
    std::vector<int> pipes;
    for (int rank = 0; rank < world_size; ++rank) {
      int fds[2];
      if (::pipe(fds) != 0) throw std::runtime_error("test setup: pipe failed");
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(fds[0]);
        int code = 0;
        std::string message;
        try {
          RendezvousConfig c;
          c.master_port = port;
          c.rank = rank;
          c.world_size = world_size;
          c.timeout = milliseconds(10000);
          Rendezvous rv(c);
          std::unique_ptr<Collectives> coll = collectives_gloo(rv, timeout, loop);
          body(rank, rv, *coll);
        } catch (const Mismatch& e) {
          code = 2, message = e.what();
        } catch (const CollectiveError& e) {
          code = 3, message = e.what();
        } catch (const std::exception& e) {
          code = 4, message = e.what();
        }
        if (::write(fds[1], message.data(), message.size()) < 0) code = 5;
        ::_exit(code);
      }
      ::close(fds[1]);
      pids.push_back(pid);
      pipes.push_back(fds[0]);
    }
    results.assign(world_size, {});
    Stopwatch clock;
    for (int rank = 0; rank < world_size; ++rank) {
      int status = 0;
      while (::waitpid(pids[rank], &status, WNOHANG) == 0) {
        if (clock.seconds() * 1000 > static_cast<double>(limit.count())) {
          for (pid_t pid : pids) ::kill(pid, SIGKILL);  // only our own children
        }
        std::this_thread::sleep_for(milliseconds(5));
      }
      results[rank].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      char buffer[4096];
      ssize_t n = 0;
      while ((n = ::read(pipes[rank], buffer, sizeof buffer)) > 0) results[rank].message.append(buffer, n);
      ::close(pipes[rank]);
    }
    bool port_taken = false;
    for (const RankResult& r : results) port_taken |= r.message.find("is in use") != std::string::npos;
    if (!port_taken) break;
  }
  return results;
}

inline void expect_all_succeeded(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << ": " << results[r].message;
  }
}

}  // namespace qsync::test
