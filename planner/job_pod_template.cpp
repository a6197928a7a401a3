// File: planner/job_pod_template.cpp
// spec.podTemplate and the entries' podTemplate: rows, reads, merge and rules (see
// job_pod_template.h).
#include "planner/job_pod_template.h"

#include <algorithm>
#include <set>

#include "planner/job_fields.h"
#include "planner/json_access.h"

namespace qsync {
namespace {

using json = nlohmann::json;

std::map<std::string, std::string> text_map(const json& o) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : o.items()) out[k] = v.is_string() ? v.get<std::string>() : v.dump();
  return out;
}

// Items of `base` and then `over`, an item of `over` replacing base's item of the same `key`.
json append_by_key(const json& base, const json& over, const char* key = "name") {
  std::set<std::string> replaced;
  for (const json& item : over)
    if (item.contains(key)) replaced.insert(item[key].get<std::string>());
  json out = json::array();
  for (const json& item : base)
    if (!item.contains(key) || replaced.count(item[key].get<std::string>()) == 0) out.push_back(item);
  for (const json& item : over) out.push_back(item);
  return out;
}

const json& required_terms(const json& affinity) {
  static const json none = json::array();
  const json::json_pointer at("/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms");
  return affinity.contains(at) && affinity[at].is_array() ? affinity[at] : none;
}

void check_one(const json& t, const std::string& where, const json& inherited_volumes, std::vector<std::string>& problems) {
  const std::vector<std::string>& env_names = reserved_worker_env();
  for (const json& e : t.value("env", json::array())) {
    const std::string name = e.value("name", "");
    if (std::find(env_names.begin(), env_names.end(), name) != env_names.end())
      problems.push_back(where + ".env: " + name + " is set by the operator (rendezvous and rank); remove it");
  }
  const std::vector<std::string>& volume_names = reserved_worker_volumes();
  std::set<std::string> declared;
  for (const json& v : inherited_volumes) declared.insert(v.value("name", ""));
  for (const json& v : t.value("volumes", json::array())) {
    const std::string name = v.value("name", "");
    if (std::find(volume_names.begin(), volume_names.end(), name) != volume_names.end())
      problems.push_back(where + ".volumes: the name \"" + name + "\" is one of the operator's volumes (plan, tmp, "
                         "checkpoints, data, model); rename it");
    declared.insert(name);
  }
  for (const json& m : t.value("volumeMounts", json::array()))
    if (declared.count(m.value("name", "")) == 0)
      problems.push_back(where + ".volumeMounts: \"" + m.value("name", "") + "\" names no volume of " + where +
                         ".volumes (or spec.podTemplate.volumes); declare it there");
  for (const char* key : {"labels", "annotations"}) {
    const json map = t.value(key, json::object());
    for (const auto& [k, v] : map.items())
      if (k.rfind("qsync.dev/", 0) == 0)
        problems.push_back(where + "." + key + ": \"" + k + "\" is in the operator's qsync.dev/ prefix; use another key");
  }
}

}  // namespace

bool PodTemplateSpec::empty() const { return *this == PodTemplateSpec{}; }

const std::vector<std::string>& reserved_worker_env() {
  static const std::vector<std::string> names = {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "QSYNC_JOB"};
  return names;
}

const std::vector<std::string>& reserved_worker_volumes() {
  static const std::vector<std::string> names = {"plan", "tmp", "checkpoints", "data", "model"};
  return names;
}

void add_pod_template_fields(std::vector<Field>& f, const std::string& p) {
  f.push_back(Field::object(p, "Settings for the worker pods on a shared cluster (merged with the operator's own)."));
  f.push_back(Field::string_map(p + ".labels", "Extra pod labels (not in the qsync.dev/ prefix)."));
  f.push_back(Field::string_map(p + ".annotations", "Extra pod annotations (not in the qsync.dev/ prefix)."));
  f.push_back(Field::string_map(p + ".nodeSelector", "Extra node labels the pods require (added to the operator's placement)."));
  f.push_back(Field::object(p + ".affinity",
                            "A core/v1 Affinity. Required node affinity terms are combined with the operator's placement "
                            "(both must hold); preferred terms and pod (anti-)affinity are taken as they are.")
                  .open());
  f.push_back(Field::array(p + ".tolerations", "Taints the pods tolerate (e.g. a tainted inference node pool)."));
  f.push_back(Field::string(p + ".tolerations[].key", "The taint key (empty with operator Exists: every taint)."));
  f.push_back(Field::string(p + ".tolerations[].operator", "How the value is compared.").one_of({"Exists", "Equal"}));
  f.push_back(Field::string(p + ".tolerations[].value", "The taint value (operator Equal)."));
  f.push_back(Field::string(p + ".tolerations[].effect", "The taint effect tolerated (empty: every effect).")
                  .one_of({"NoSchedule", "PreferNoSchedule", "NoExecute"}));
  f.push_back(Field::integer(p + ".tolerations[].tolerationSeconds", "NoExecute: how long the pod stays after the taint."));
  f.push_back(Field::string(p + ".priorityClassName", "The pods' PriorityClass.").non_empty());
  f.push_back(Field::string(p + ".serviceAccountName", "The pods' ServiceAccount.").non_empty());
  f.push_back(Field::string(p + ".schedulerName", "The scheduler that places the pods (e.g. volcano).").non_empty());
  f.push_back(Field::array(p + ".imagePullSecrets", "Secrets for pulling the worker image."));
  f.push_back(Field::string(p + ".imagePullSecrets[].name", "The Secret's name.").mandatory().non_empty());
  f.push_back(Field::array(p + ".env", "Extra environment of the worker container (not the operator's: RANK, WORLD_SIZE, ...)."));
  f.push_back(Field::string(p + ".env[].name", "The variable.").mandatory().non_empty());
  f.push_back(Field::string(p + ".env[].value", "Its value."));
  f.push_back(Field::object(p + ".env[].valueFrom", "A core/v1 EnvVarSource (secretKeyRef, configMapKeyRef, fieldRef, ...).").open());
  f.push_back(Field::array(p + ".volumes", "Extra core/v1 Volumes of the pods.").open());
  f.push_back(Field::string(p + ".volumes[].name", "The volume's name (not plan, tmp, checkpoints, data or model).")
                  .mandatory()
                  .non_empty());
  f.push_back(Field::array(p + ".volumeMounts", "Mounts of those volumes in the worker container."));
  f.push_back(Field::string(p + ".volumeMounts[].name", "The volume.").mandatory().non_empty());
  f.push_back(Field::string(p + ".volumeMounts[].mountPath", "Where it is mounted.").mandatory().non_empty());
  f.push_back(Field::boolean(p + ".volumeMounts[].readOnly", "Mount read-only."));
  f.push_back(Field::string(p + ".volumeMounts[].subPath", "A path inside the volume.").non_empty());
}

PodTemplateSpec pod_template_from(const json& t) {
  PodTemplateSpec s;
  s.labels = text_map(t.value("labels", json::object()));
  s.annotations = text_map(t.value("annotations", json::object()));
  s.node_selector = text_map(t.value("nodeSelector", json::object()));
  s.affinity = t.value("affinity", json::object());
  s.tolerations = t.value("tolerations", json::array());
  s.priority_class_name = json_text(t, "priorityClassName");
  s.service_account_name = json_text(t, "serviceAccountName");
  s.scheduler_name = json_text(t, "schedulerName");
  for (const json& secret : t.value("imagePullSecrets", json::array())) s.image_pull_secrets.push_back(json_text(secret, "name"));
  s.env = t.value("env", json::array());
  s.volumes = t.value("volumes", json::array());
  s.volume_mounts = t.value("volumeMounts", json::array());
  return s;
}

json to_json(const PodTemplateSpec& s) {
  json out = json::object();
  if (!s.labels.empty()) out["labels"] = s.labels;
  if (!s.annotations.empty()) out["annotations"] = s.annotations;
  if (!s.node_selector.empty()) out["nodeSelector"] = s.node_selector;
  if (!s.affinity.empty()) out["affinity"] = s.affinity;
  if (!s.tolerations.empty()) out["tolerations"] = s.tolerations;
  put_text(out, "priorityClassName", s.priority_class_name);
  put_text(out, "serviceAccountName", s.service_account_name);
  put_text(out, "schedulerName", s.scheduler_name);
  for (const std::string& name : s.image_pull_secrets) out["imagePullSecrets"].push_back({{"name", name}});
  if (!s.env.empty()) out["env"] = s.env;
  if (!s.volumes.empty()) out["volumes"] = s.volumes;
  if (!s.volume_mounts.empty()) out["volumeMounts"] = s.volume_mounts;
  return out;
}

json and_node_selector_terms(const json& a, const json& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  json out = json::array();
  for (const json& x : a)
    for (const json& y : b) {
      json term = json::object();
      for (const char* key : {"matchExpressions", "matchFields"}) {
        json items = x.value(key, json::array());
        for (const json& item : y.value(key, json::array())) items.push_back(item);
        if (!items.empty()) term[key] = items;
      }
      out.push_back(term);
    }
  return out;
}

PodTemplateSpec merge_pod_templates(const PodTemplateSpec& base, const PodTemplateSpec& over) {
  PodTemplateSpec m = base;
  for (const auto& [k, v] : over.labels) m.labels[k] = v;
  for (const auto& [k, v] : over.annotations) m.annotations[k] = v;
  for (const auto& [k, v] : over.node_selector) m.node_selector[k] = v;
  const json terms = and_node_selector_terms(required_terms(base.affinity), required_terms(over.affinity));
  for (const auto& [kind, value] : over.affinity.items()) m.affinity[kind] = value;
  if (!terms.empty())
    m.affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = terms;
  for (const json& t : over.tolerations) m.tolerations.push_back(t);
  if (!over.priority_class_name.empty()) m.priority_class_name = over.priority_class_name;
  if (!over.service_account_name.empty()) m.service_account_name = over.service_account_name;
  if (!over.scheduler_name.empty()) m.scheduler_name = over.scheduler_name;
  for (const std::string& s : over.image_pull_secrets)
    if (std::find(m.image_pull_secrets.begin(), m.image_pull_secrets.end(), s) == m.image_pull_secrets.end())
      m.image_pull_secrets.push_back(s);
  m.env = append_by_key(base.env, over.env);
  m.volumes = append_by_key(base.volumes, over.volumes);
  m.volume_mounts = append_by_key(base.volume_mounts, over.volume_mounts, "mountPath");
  return m;
}

void check_pod_template_rules(const json& spec, std::vector<std::string>& problems) {
  const json job_wide = spec.value("podTemplate", json::object());
  if (spec.contains("podTemplate")) check_one(job_wide, "spec.podTemplate", json::array(), problems);
  const json pool = spec.value("pool", json::object());
  for (const char* group : {"training", "inference"}) {
    const json entries = pool.value(group, json::array());
    for (size_t i = 0; i < entries.size(); ++i)
      if (entries[i].contains("podTemplate"))
        check_one(entries[i]["podTemplate"], std::string("spec.pool.") + group + "[" + std::to_string(i) + "].podTemplate",
                  job_wide.value("volumes", json::array()), problems);
  }
}

}  // namespace qsync
