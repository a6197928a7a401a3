// File: runner/local_job_check.h
// What `qsync run` refuses before any profile, calibration or worker: the model it cannot find,
// a device class that is neither on this machine nor emulable here (GPU classes without their
// GPU), a data path that does not exist (or a character model without one), and a memory budget
// below what the model needs at the rank's local batch even at its lowest-memory precisions.
// Each message names the field of the job file and the fix. (The job parser has already refused
// malformed YAML, unknown fields, bad values and a global batch below the number of ranks.)
#pragma once

#include <vector>

#include "kernels/device_class.h"
#include "planner/job_spec.h"
#include "planner/model_desc.h"

namespace qsync {

struct LocalJobCheck {
  ModelDesc model;
  std::vector<const DeviceClass*> classes;  // per rank, the class as requested
};

// Throws std::invalid_argument listing every problem found.
LocalJobCheck check_local_job(const JobFile& job);

}  // namespace qsync
