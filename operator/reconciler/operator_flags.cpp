// File: operator/reconciler/operator_flags.cpp
// qsync-operator's flags (see operator_flags.h).
#include "operator/reconciler/operator_flags.h"

#include <functional>
#include <map>
#include <stdexcept>

namespace qsync::reconciler {
namespace {

int int_flag(const std::string& flag, const std::string& v) {
  size_t used = 0;
  int out = 0;
  try {
    out = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty()) throw std::invalid_argument(flag + " takes an integer, got '" + v + "'");
  return out;
}

double number_flag(const std::string& flag, const std::string& v) {
  size_t used = 0;
  double out = 0;
  try {
    out = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty() || !(out > 0)) throw std::invalid_argument(flag + " takes a positive number, got '" + v + "'");
  return out;
}

bool bool_flag(const std::string& flag, const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  throw std::invalid_argument(flag + " takes true or false, got '" + v + "'");
}

// A JSON list of tolerations, each an object with only Toleration fields.
nlohmann::json tolerations_flag(const std::string& v) {
  nlohmann::json t;
  try {
    t = nlohmann::json::parse(v);
  } catch (const nlohmann::json::exception&) {
    t = nullptr;
  }
  bool ok = t.is_array();
  for (const nlohmann::json& item : ok ? t : nlohmann::json::array()) {
    ok = ok && item.is_object();
    if (!item.is_object()) continue;
    for (const auto& [key, value] : item.items())
      ok = ok && (key == "key" || key == "operator" || key == "value" || key == "effect" || key == "tolerationSeconds");
  }
  if (!ok)
    throw std::invalid_argument("--gpu-tolerations takes a JSON list of tolerations such as "
                                "[{\"key\":\"nvidia.com/gpu\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}], got '" +
                                v + "'");
  return t;
}

}  // namespace

const char* OPERATOR_USAGE =
    "usage: qsync-operator [--kubeconfig PATH] [--namespace NS] [--leader-elect=true|false]\n"
    "         [--leader-election-namespace NS] [--leader-election-id NAME] [--metrics-port 8080 (-1: off)]\n"
    "         [--health-port 8081 (-1: off)] [--workers 4] [--qps 20] [--burst 30] [--worker-image IMAGE]\n"
    "         [--master-port 29500] [--prometheus-url URL (borrowing entries' demand queries)]\n"
    "         [--gpu-worker-image IMAGE (GPU ranks; default: --worker-image)]\n"
    "         [--gpu-ranks-on-cpu=true|false (nodes that only advertise nvidia.com/gpu: GPU ranks run as\n"
    "          the worker's default CPU class)]\n"
    "         [--gpu-tolerations JSON (tolerations of GPU ranks' pods, e.g.\n"
    "          '[{\"key\":\"nvidia.com/gpu\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}]')]\n"
    "         [--gang-scheduler-name NAME (schedulerName of gang-scheduled jobs' pods whose podTemplate\n"
    "          names none; default: the gang scheduler's usual one, scheduler-plugins-scheduler)]\n";

OperatorFlags parse_operator_flags(const std::vector<std::string>& args) {
  OperatorFlags f;
  const std::map<std::string, std::function<void(const std::string&)>> with_value = {
      {"--kubeconfig", [&](const std::string& v) { f.kubeconfig = v; }},
      {"--namespace", [&](const std::string& v) { f.namespace_ = v; }},
      {"--leader-elect", [&](const std::string& v) { f.leader_elect = bool_flag("--leader-elect", v); }},
      {"--leader-election-namespace", [&](const std::string& v) { f.leader_election_namespace = v; }},
      {"--leader-election-id", [&](const std::string& v) { f.leader_election_id = v; }},
      {"--metrics-port", [&](const std::string& v) { f.metrics_port = int_flag("--metrics-port", v); }},
      {"--health-port", [&](const std::string& v) { f.health_port = int_flag("--health-port", v); }},
      {"--workers", [&](const std::string& v) { f.workers = int_flag("--workers", v); }},
      {"--qps", [&](const std::string& v) { f.qps = number_flag("--qps", v); }},
      {"--burst", [&](const std::string& v) { f.burst = int_flag("--burst", v); }},
      {"--worker-image", [&](const std::string& v) { f.worker_image = v; }},
      {"--gpu-worker-image", [&](const std::string& v) { f.gpu_worker_image = v; }},
      {"--gpu-ranks-on-cpu", [&](const std::string& v) { f.gpu_ranks_on_cpu = bool_flag("--gpu-ranks-on-cpu", v); }},
      {"--master-port", [&](const std::string& v) { f.master_port = int_flag("--master-port", v); }},
      {"--prometheus-url", [&](const std::string& v) { f.prometheus_url = v; }},
      {"--gpu-tolerations", [&](const std::string& v) { f.gpu_tolerations = tolerations_flag(v); }},
      {"--gang-scheduler-name", [&](const std::string& v) { f.gang_scheduler_name = v; }},
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    bool inline_value = false;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inline_value = true;
    }
    if (flag == "--help" || flag == "-h") {
      f.help = true;
      continue;
    }
    auto it = with_value.find(flag);
    if (it == with_value.end()) throw std::invalid_argument("unknown argument '" + args[i] + "'\n" + OPERATOR_USAGE);
    if (!inline_value) {
      const bool next_is_value = i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0;
      if ((flag == "--leader-elect" || flag == "--gpu-ranks-on-cpu") && !next_is_value) {
        value = "true";  // a bare boolean flag
      } else {
        if (i + 1 >= args.size()) throw std::invalid_argument(flag + " needs a value\n" + OPERATOR_USAGE);
        value = args[++i];
      }
    }
    it->second(value);
  }
  if (f.workers < 1) throw std::invalid_argument("--workers must be at least 1, got " + std::to_string(f.workers));
  if (f.burst < 1) throw std::invalid_argument("--burst must be at least 1, got " + std::to_string(f.burst));
  if (f.master_port < 1 || f.master_port > 65535)
    throw std::invalid_argument("--master-port must be a TCP port (1-65535), got " + std::to_string(f.master_port));
  return f;
}

}  // namespace qsync::reconciler
