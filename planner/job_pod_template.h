// File: planner/job_pod_template.h
// The job fields that shape the worker pods on a shared cluster: spec.podTemplate (every worker)
// and spec.pool.{training,inference}[].podTemplate (that entry's workers, applied on top).
// Tolerations, a node selector and affinity (merged with the operator's own placement), a
// priority class, service account, scheduler name, image pull secrets, extra env, volumes and
// mounts, labels and annotations. As types, as rows of the field table (job_fields.cpp adds
// them), their JSON form, the merge of the two levels, and the rules a schema cannot state
// (names the operator owns: env RANK/WORLD_SIZE/..., volumes plan/tmp/..., qsync.dev/ labels).
// The operator writes the merged template into each Pod (operator/reconciler/pod_template.h).
//
//   podTemplate:
//     tolerations: [{key: dedicated, operator: Equal, value: inference, effect: NoSchedule}]
//     priorityClassName: research
//     serviceAccountName: trainer
//     imagePullSecrets: [{name: regcred}]
//     env: [{name: HF_HOME, value: /cache}]
//     volumes: [{name: cache, emptyDir: {}}]
//     volumeMounts: [{name: cache, mountPath: /cache}]
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qsync {

struct Field;

struct PodTemplateSpec {
  std::map<std::string, std::string> labels, annotations, node_selector;
  nlohmann::json affinity = nlohmann::json::object();  // a core/v1 Affinity (nodeAffinity, podAntiAffinity, ...)
  nlohmann::json tolerations = nlohmann::json::array();
  std::string priority_class_name, service_account_name, scheduler_name;  // "": not set
  std::vector<std::string> image_pull_secrets;
  nlohmann::json env = nlohmann::json::array();            // core/v1 EnvVar items
  nlohmann::json volumes = nlohmann::json::array();        // core/v1 Volume items
  nlohmann::json volume_mounts = nlohmann::json::array();  // core/v1 VolumeMount items (the worker container; keyed by mountPath)
  bool empty() const;
  bool operator==(const PodTemplateSpec&) const = default;
};

// Env names the operator sets on every worker (a template may not set them).
const std::vector<std::string>& reserved_worker_env();
// Volume names the operator's own volumes use.
const std::vector<std::string>& reserved_worker_volumes();

// The template's rows under `prefix` ("spec.podTemplate", "spec.pool.training[].podTemplate").
void add_pod_template_fields(std::vector<Field>& fields, const std::string& prefix);

// Reads a validated template.
PodTemplateSpec pod_template_from(const nlohmann::json& t);
nlohmann::json to_json(const PodTemplateSpec& t);

// `over` on top of `base`: maps merged (over's values win), lists appended (tolerations, env,
// volumes, mounts, pull secrets; an env var or volume of the same name, a mount of the same
// path, is over's), names set
// in `over` replace base's; affinity: over's kinds replace base's, except required node
// affinity terms, which are combined (both must hold).
PodTemplateSpec merge_pod_templates(const PodTemplateSpec& base, const PodTemplateSpec& over);

// Node affinity requirements of both: every term of `a` ANDed with every term of `b` (terms of
// one list are ORed, as Kubernetes reads nodeSelectorTerms). Either empty: the other.
nlohmann::json and_node_selector_terms(const nlohmann::json& a, const nlohmann::json& b);

// Reserved names, mounts of volumes no template declares, qsync.dev/ labels. `spec` is the
// defaulted, field-checked spec.
void check_pod_template_rules(const nlohmann::json& spec, std::vector<std::string>& problems);

}  // namespace qsync
