// File: bench/lending_sim/lending_sim_main.cpp
// qsync-lending-sim: a simulated day of off-peak borrowing (lending_simulation.h) with the
// operator's own logic; prints what it measured, as text or JSON.
//   qsync-lending-sim [--json] [--timeline] [--job JOB.yaml] [--peak-rps 700] [--trough 0.35] [--seed 1]
//                     [--inference-nodes 16] [--serving-replicas 120]
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "bench/lending_sim/lending_simulation.h"

int main(int argc, char** argv) {
  using namespace qsync::lending_sim;
  SimConfig c;
  c.job_manifest = default_job_manifest();
  bool as_json = false, timeline = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--json") {
        as_json = true;
      } else if (a == "--timeline") {
        timeline = true;
      } else if (a == "--job") {
        std::ifstream in(value());
        std::ostringstream text;
        text << in.rdbuf();
        c.job_manifest = text.str();
      } else if (a == "--peak-rps") {
        c.demand.peak_rps = std::stod(value());
      } else if (a == "--trough") {
        c.demand.trough_fraction = std::stod(value());
      } else if (a == "--seed") {
        c.demand.seed = std::stoull(value());
      } else if (a == "--inference-nodes") {
        c.inference_nodes = std::stoll(value());
      } else if (a == "--serving-replicas") {
        c.serving_replicas = std::stoll(value());
      } else {
        throw std::invalid_argument("unknown argument " + a +
                                    " (usage: [--json] [--job JOB.yaml] [--peak-rps R] [--trough F] [--seed N] "
                                    "[--inference-nodes N] [--serving-replicas N])");
      }
    }
    const SimReport r = simulate_day(c);
    std::cout << (as_json ? r.to_json().dump(2) + "\n" : r.text());
    if (timeline) std::cout << r.timeline_text();
  } catch (const std::exception& e) {
    std::cerr << "qsync-lending-sim: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
