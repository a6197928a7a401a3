// File: operator/reconciler/pod_group.h
// Gang scheduling (spec.runPolicy.schedulingPolicy, planner/job_scheduling_policy.h): the
// PodGroup a job owns, as a pure function of the job and its world size. Named after the job,
// labelled qsync.dev/job, a controller owner reference to the job (the garbage collector deletes
// it with the job), spec.minMember = every rank of the plan (a data-parallel step needs all of
// them), spec.scheduleTimeoutSeconds when the job sets it. The reconciler creates it before the
// first pod, updates it when a re-plan changes the world size, and deletes it when the job stops
// asking for a gang (job_pod_group_pass.cpp); the worker pods carry the scheduler's pod-group
// label and its schedulerName (desired_children.h, worker_pod_settings.h).
//
//   const json group = desired_pod_group(job_object, job, int64_t(plan.ranks.size()));
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "operator/api/hybrid_training_job.h"
#include "operator/kube/resource.h"
#include "planner/job_scheduling_policy.h"

namespace qsync::reconciler {

// The job's gang scheduler, when spec.runPolicy.schedulingPolicy asks for one.
const GangScheduler* job_gang_scheduler(const api::HybridTrainingJob& job);
// The PodGroup resource of a gang scheduler (namespaced, kind PodGroup).
kube::ResourceType pod_group_type(const GangScheduler& gang);
std::string pod_group_name(const std::string& job);  // the job's name

// The PodGroup of a gang-scheduled job with `world_size` ranks. The job must have a gang.
nlohmann::json desired_pod_group(const nlohmann::json& job_object, const api::HybridTrainingJob& job, int64_t world_size);

// Whether `live` (the PodGroup read from the API) already has `desired`'s spec and owner.
bool pod_group_matches(const nlohmann::json& live, const nlohmann::json& desired);

}  // namespace qsync::reconciler
