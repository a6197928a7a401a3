// File: runner/local_measurements.h
// The measurements `qsync run` makes for the planner (local_planning.h), each once, kept for the
// next run: the pool's missing device profiles (measured as the job will run, its ranks at once
// as one world), the all-reduce profile of its world size over loopback, and the calibration
// statistics of the indicator. Each runs this build's binaries with its output in logs/; a failed
// one throws std::runtime_error naming its command and log.
//
//   const LocalMeasuring m{file, inputs, model, worker, logs, profiles, world_signature, say};
//   measure_missing_profiles(m);  measure_comm_profile(m);
//   options.calibration = calibration_statistics(m, strategy);
#pragma once

#include <functional>
#include <string>

#include "planner/job_spec.h"
#include "planner/model_desc.h"
#include "runner/local_planning.h"

namespace qsync {

struct LocalMeasuring {
  const JobFile& file;
  const LocalPlanningInputs& in;
  const ModelDesc& model;
  std::string worker;           // the qsync-worker binary
  std::string logs;             // the measurements' logs (and the load-only profiles)
  std::string profiles;         // where the profiles are kept
  std::string world_signature;  // the pool's world (local_world_signature)
  std::function<void(const std::string&)> say;
};

// The device profiles the pool lacks (with given plans: only classes without any profile).
void measure_missing_profiles(const LocalMeasuring& m);

// The all-reduce profile of the pool's world size, where the pool has more than one rank and the
// benchmark binary is beside the worker.
void measure_comm_profile(const LocalMeasuring& m);

// The calibration statistics file for `strategy`: the job's, or one collected under the work
// directory; "" where none is needed (given plans, a strategy without the indicator).
std::string calibration_statistics(const LocalMeasuring& m, const std::string& strategy);

}  // namespace qsync
