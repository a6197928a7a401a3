// File: operator/reconciler/comm_profiles.h
// The all-reduce the operator plans with: measured communication profiles stored as ConfigMaps
// in the job's namespace, labelled qsync.dev/comm-profile: "true", key comm.json (the output of
// `qsync-bench-allreduce --comm-profile comm.json`, run as a world of the cluster's ranks),
// selected by spec.planning.profiles' name prefix like the device profiles. Of those, the one of
// the plan's world size, else the nearest measured world size rescaled (planner's
// comm_profile_for_world); without any, the built-in estimate (a ring over 10 Gbit/s).
//
//   kubectl create configmap qsync-comm-w2 --from-file=comm.json && kubectl label configmap qsync-comm-w2 qsync.dev/comm-profile=true
//   const PlanningComm comm = planning_comm_profile(config_maps, job.spec.planning.profiles, world);
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/device_profile.h"

namespace qsync::reconciler {

inline constexpr const char* COMM_PROFILE_LABEL = "qsync.dev/comm-profile";
inline constexpr const char* COMM_PROFILE_KEY = "comm.json";

struct ConfigMapCommProfiles {
  std::vector<CommProfile> profiles;  // source: "ConfigMap NAME key comm.json"
  std::vector<std::string> problems;  // ConfigMaps skipped, and why
};

// The measured profiles in labelled ConfigMaps whose names start with `name_prefix` ("": every one).
ConfigMapCommProfiles comm_profiles_from_config_maps(const std::vector<nlohmann::json>& config_maps,
                                                     const std::string& name_prefix = "");

struct PlanningComm {
  CommProfile profile;  // what the allocator and the replayer cost the all-reduce with
  std::string note;     // which profile, for the plan's notes
  std::vector<std::string> problems;
};

// The all-reduce of `world_size` ranks for a job's plan (see above).
PlanningComm planning_comm_profile(const std::vector<nlohmann::json>& config_maps, const std::string& name_prefix,
                                   int world_size);

}  // namespace qsync::reconciler
