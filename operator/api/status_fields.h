// File: operator/api/status_fields.h
// The HybridTrainingJob's status fields as a table, in the same Field form as the job's spec
// fields (planner/job_fields.h): the CRD's status schema is generated from it and
// hybrid_training_job_status.cpp validates through it.
#pragma once

#include <vector>

#include "planner/job_fields.h"

namespace qsync::api {

// Every field of .status, parents before children.
const std::vector<Field>& hybrid_training_job_status_fields();

}  // namespace qsync::api
