// File: operator/reconciler/comm_profiles.cpp
// Measured communication profiles from labelled ConfigMaps (see comm_profiles.h).
#include "operator/reconciler/comm_profiles.h"

#include <cstdio>

namespace qsync::reconciler {

using json = nlohmann::json;

namespace {

std::string microseconds(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f us", seconds * 1e6);
  return buf;
}

}  // namespace

ConfigMapCommProfiles comm_profiles_from_config_maps(const std::vector<json>& config_maps, const std::string& name_prefix) {
  ConfigMapCommProfiles out;
  for (const json& cm : config_maps) {
    const json labels = cm["metadata"].value("labels", json::object());
    const std::string name = cm["metadata"].value("name", "");
    if (labels.value(COMM_PROFILE_LABEL, json()) != "true" || name.rfind(name_prefix, 0) != 0) continue;
    const std::string where = "ConfigMap " + name + " key " + COMM_PROFILE_KEY;
    const json data = cm.value("data", json::object());
    if (!data.contains(COMM_PROFILE_KEY) || !data[COMM_PROFILE_KEY].is_string()) {
      out.problems.push_back(where + " is missing: the communication profile ConfigMap needs --from-file=" +
                             COMM_PROFILE_KEY + "=FILE (qsync-bench-allreduce --comm-profile FILE)");
      continue;
    }
    try {
      CommProfile p = comm_profile_from_json(data[COMM_PROFILE_KEY].get<std::string>(), where);
      p.source = where;
      out.profiles.push_back(p);
    } catch (const std::exception& e) {
      out.problems.push_back(std::string("skipped: ") + e.what());
    }
  }
  return out;
}

PlanningComm planning_comm_profile(const std::vector<json>& config_maps, const std::string& name_prefix, int world_size) {
  ConfigMapCommProfiles measured = comm_profiles_from_config_maps(config_maps, name_prefix);
  PlanningComm out;
  out.problems = std::move(measured.problems);
  out.profile = comm_profile_for_world(measured.profiles, world_size);
  const std::string cost = "alpha " + microseconds(out.profile.alpha) + ", " +
                           microseconds(out.profile.beta * double(1 << 20)) + " per MiB";
  const bool from_config_map = out.profile.source.rfind("ConfigMap ", 0) == 0;  // measured, maybe rescaled
  if (!from_config_map) {
    out.note = "all-reduce estimated (" + cost + "): no measured communication profile (a ConfigMap labelled " +
               COMM_PROFILE_LABEL + "=true with " + COMM_PROFILE_KEY + " from qsync-bench-allreduce --comm-profile)";
    return out;
  }
  out.note = "all-reduce measured (" + cost + "): " + out.profile.source;
  return out;
}

}  // namespace qsync::reconciler
