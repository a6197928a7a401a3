// File: operator/api/hybrid_training_job.cpp
// HybridTrainingJob <-> JSON: the spec through the job's parser (planner/job_spec.h) plus the
// operator's pool rule, the status through its own table.
#include "operator/api/hybrid_training_job.h"

#include <stdexcept>

namespace qsync::api {

using json = nlohmann::json;

std::string HybridTrainingJob::name() const { return metadata.value("name", ""); }
std::string HybridTrainingJob::namespace_name() const { return metadata.value("namespace", ""); }
int64_t HybridTrainingJob::generation() const { return metadata.value("generation", int64_t{0}); }

HybridTrainingJobSpec hybrid_training_job_spec_from_json(const json& input) {
  HybridTrainingJobSpec s = job_spec_from_json(input);
  if (s.pool.training.empty() && s.pool.inference.empty())
    throw std::invalid_argument(
        "invalid spec: spec.pool needs at least one training or inference entry for the operator (pool.local is for "
        "`qsync run` only), e.g. training: [{name: train, nodeSelector: {qsync.dev/pool: training}}]");
  return s;
}

// A string member, or the JSON text of a value of another type (for the message), or `fallback`.
static std::string text_member(const json& o, const char* key, const std::string& fallback) {
  if (!o.contains(key)) return fallback;
  return o[key].is_string() ? o[key].get<std::string>() : o[key].dump();
}

HybridTrainingJob hybrid_training_job_from_json(const json& object) {
  if (!object.is_object()) throw std::invalid_argument("a HybridTrainingJob is a mapping, got " + object.dump());
  const std::string api_version = text_member(object, "apiVersion", API_VERSION);
  const std::string kind = text_member(object, "kind", KIND);
  if (api_version != API_VERSION || kind != KIND)
    throw std::invalid_argument("expected apiVersion " + std::string(API_VERSION) + " and kind " + KIND + ", got " +
                                api_version + " " + kind);
  HybridTrainingJob job;
  job.metadata = object.contains("metadata") ? object["metadata"] : json::object();
  if (!job.metadata.is_object()) throw std::invalid_argument("HybridTrainingJob metadata must be a mapping, got " + job.metadata.dump());
  for (const char* key : {"name", "namespace"})
    if (job.metadata.contains(key) && !job.metadata[key].is_string())
      throw std::invalid_argument(std::string("HybridTrainingJob metadata.") + key + " must be a string, got " + job.metadata[key].dump());
  if (job.metadata.contains("generation") && !job.metadata["generation"].is_number_integer())
    throw std::invalid_argument("HybridTrainingJob metadata.generation must be an integer, got " + job.metadata["generation"].dump());
  const std::string who = "HybridTrainingJob " + job.namespace_name() + (job.namespace_name().empty() ? "" : "/") + job.name();
  if (job.name().empty()) throw std::invalid_argument(who + ": metadata.name is missing (the job's name)");
  if (!object.contains("spec")) throw std::invalid_argument(who + ": spec is missing (what to train and on which pool)");
  try {
    job.spec = hybrid_training_job_spec_from_json(object["spec"]);
    if (object.contains("status") && !object["status"].is_null())
      job.status = hybrid_training_job_status_from_json(object["status"]);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(who + ": " + e.what());
  }
  return job;
}

json to_json(const HybridTrainingJob& job) {
  json out = {{"apiVersion", API_VERSION}, {"kind", KIND}, {"metadata", job.metadata}, {"spec", to_json(job.spec)}};
  if (job.status) out["status"] = to_json(*job.status);
  return out;
}

}  // namespace qsync::api
