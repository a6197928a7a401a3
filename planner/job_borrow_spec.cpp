// File: planner/job_borrow_spec.cpp
// Borrowing and elastic fields: table rows, reads, JSON and cross-field rules (see
// job_borrow_spec.h).
#include "planner/job_borrow_spec.h"

#include <stdexcept>

#include "planner/job_fields.h"
#include "planner/job_spec.h"
#include "planner/json_access.h"

namespace qsync {
namespace {

using json = nlohmann::json;

const char* CRON_PATTERN = R"(^(@(hourly|daily|midnight|weekly|monthly)|[^ ]+( +[^ ]+){4})$)";
const char* CRON_HINT = "a cron expression of 5 fields (minute hour day-of-month month day-of-week), e.g. \"0 20 * * 1-5\"";
const char* ZONE_PATTERN = R"(^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$)";
const char* URL_PATTERN = R"(^https?://.+$)";

std::map<std::string, std::string> string_map(const json& o) {
  std::map<std::string, std::string> out;
  for (const auto& [key, v] : o.items()) out[key] = v.is_string() ? v.get<std::string>() : v.dump();
  return out;
}

double duration_or_problem(const std::string& text, const std::string& where, std::vector<std::string>& problems) {
  try {
    return parse_duration_seconds(text, where);
  } catch (const std::invalid_argument& e) {
    problems.push_back(e.what());
    return 0;
  }
}

}  // namespace

void add_borrow_fields(std::vector<Field>& f, const std::string& b) {
  f.push_back(Field::object(b, "Borrow this entry's GPUs from an inference workload when it needs fewer replicas "
                               "(docs/borrowing.md): the operator scales it in, lends the freed GPUs to the job and "
                               "takes them back when demand returns."));
  f.push_back(Field::object(b + ".workload", "The workload, in the job's namespace, annotated qsync.dev/lendable: \"true\".")
                  .mandatory());
  f.push_back(Field::string(b + ".workload.kind", "Deployment or StatefulSet.")
                  .one_of({"Deployment", "StatefulSet"})
                  .with_default("Deployment"));
  f.push_back(Field::string(b + ".workload.name", "The workload's name (or give selector).").non_empty());
  f.push_back(Field::string_map(b + ".workload.selector", "Labels that select exactly one workload (or give name)."));
  f.push_back(Field::integer(b + ".minServingReplicas", "Replicas that always keep serving: never scaled in below this.")
                  .at_least(0)
                  .with_default(1));
  f.push_back(Field::integer(b + ".reclaimGraceSeconds",
                             "How fast lent GPUs must come back: from a reclaim's trigger to the replicas Ready. Lending "
                             "also stops this long before a window closes.")
                  .at_least(1)
                  .with_default(300));
  f.push_back(Field::integer(b + ".lendCooldownSeconds",
                             "Lending more waits this long after the last change (each change resizes the job).")
                  .at_least(0)
                  .with_default(300));
  f.push_back(Field::array(b + ".windows", "When lending is allowed by the clock: any open window. None: any time."));
  f.push_back(Field::string(b + ".windows[].start", "The window opens at each match of this cron expression.")
                  .mandatory()
                  .matching(CRON_PATTERN, CRON_HINT));
  f.push_back(Field::string(b + ".windows[].end", "The window closes at the next match of this cron expression.")
                  .mandatory()
                  .matching(CRON_PATTERN, CRON_HINT));
  f.push_back(Field::string(b + ".windows[].timeZone", "The time zone of both expressions, a tz database name.")
                  .matching(ZONE_PATTERN, "a tz database name such as America/New_York or UTC")
                  .with_default("UTC"));
  f.push_back(Field::object(b + ".demand",
                            "When lending is allowed by demand, and how many replicas it needs: a Prometheus query and "
                            "exactly one of threshold, requestsPerReplica or queueing."));
  f.push_back(Field::object(b + ".demand.prometheus", "The query that measures the demand.").mandatory());
  f.push_back(Field::string(b + ".demand.prometheus.url", "The Prometheus server (default: the operator's --prometheus-url).")
                  .matching(URL_PATTERN, "an http(s) URL such as http://prometheus:9090"));
  f.push_back(Field::string(b + ".demand.prometheus.query",
                            "An instant PromQL query; the values of the series it returns are added.")
                  .mandatory()
                  .non_empty());
  f.push_back(Field::number(b + ".demand.threshold",
                            "Lend down to minServingReplicas while the query is below this; reclaim all at or above it."));
  f.push_back(Field::number(b + ".demand.requestsPerReplica",
                            "The query is requests/s; each replica takes this many: ceil(rate / requestsPerReplica).")
                  .above(0));
  f.push_back(Field::object(b + ".demand.queueing",
                            "The query is requests/s; replicas are sized by the M/M/c queue for a wait target."));
  f.push_back(Field::string(b + ".demand.queueing.serviceTime", "Mean service time of one request (e.g. 200ms).")
                  .mandatory()
                  .matching(DURATION_PATTERN, "a duration such as 200ms or 1.5s"));
  f.push_back(Field::integer(b + ".demand.queueing.serversPerReplica", "Requests a replica serves at once.")
                  .at_least(1)
                  .with_default(1));
  f.push_back(Field::string(b + ".demand.queueing.waitTarget", "The queueing delay allowed at waitQuantile (e.g. 50ms).")
                  .mandatory()
                  .matching(DURATION_PATTERN, "a duration such as 50ms or 1s"));
  f.push_back(Field::number(b + ".demand.queueing.waitQuantile", "The quantile of the wait the target is for (0: the mean).")
                  .at_least(0)
                  .with_default(0.99));
  f.push_back(Field::number(b + ".demand.headroomPercent",
                            "Demand is sized this much higher (bursts, the rate window's lag, replicas' start-up time).")
                  .at_least(0)
                  .with_default(20));
  f.push_back(Field::integer(b + ".demand.maxSampleAgeSeconds", "An older demand sample counts as missing (and reclaims).")
                  .at_least(1)
                  .with_default(120));
}

void add_elastic_policy_fields(std::vector<Field>& f) {
  f.push_back(Field::object("spec.elasticPolicy",
                            "Let the world size follow the pool (nodes lost or added, GPUs lent): the job checkpoints and "
                            "restarts at the new size. Borrowing entries make a job elastic too."));
  f.push_back(Field::integer("spec.elasticPolicy.minRanks", "Below this many ranks the job waits (Phase Waiting).")
                  .at_least(1)
                  .with_default(1));
  f.push_back(Field::integer("spec.elasticPolicy.maxRanks", "At most this many ranks (default: the pool's counts).").at_least(1));
  f.push_back(Field::integer("spec.elasticPolicy.growCooldownSeconds",
                             "Growing waits this long after the last resize (shrinking never waits).")
                  .at_least(0)
                  .with_default(300));
  f.push_back(Field::number("spec.elasticPolicy.minGrowthPercent",
                            "A growth must be predicted this much faster (the planner's step time) to pay for its restart; "
                            "negative accepts a slower pool (-100: always grow onto what is offered).")
                  .at_least(-100)
                  .with_default(5));
}

BorrowSpec borrow_spec_from(const json& b, const std::string& where, std::vector<std::string>& problems) {
  BorrowSpec s;
  const json& w = b["workload"];
  s.workload = {json_text(w, "kind"), json_text(w, "name"), string_map(w.value("selector", json::object()))};
  s.min_serving_replicas = json_integer(b, "minServingReplicas");
  s.reclaim_grace_seconds = json_integer(b, "reclaimGraceSeconds");
  s.lend_cooldown_seconds = json_integer(b, "lendCooldownSeconds");
  for (const json& win : b.value("windows", json::array()))
    s.windows.push_back({json_text(win, "start"), json_text(win, "end"), json_text(win, "timeZone")});
  if (b.contains("demand")) {
    const json& d = b["demand"];
    DemandSignal signal;
    signal.prometheus = {json_text(d["prometheus"], "url"), json_text(d["prometheus"], "query")};
    if (d.contains("threshold")) signal.threshold = json_number(d, "threshold");
    if (d.contains("requestsPerReplica")) signal.requests_per_replica = json_number(d, "requestsPerReplica");
    if (d.contains("queueing")) {
      const json& q = d["queueing"];
      QueueingSizing sizing;
      sizing.service_time = json_text(q, "serviceTime");
      sizing.service_time_seconds = duration_or_problem(sizing.service_time, where + ".demand.queueing.serviceTime", problems);
      sizing.servers_per_replica = json_integer(q, "serversPerReplica");
      sizing.wait_target = json_text(q, "waitTarget");
      sizing.wait_target_seconds = duration_or_problem(sizing.wait_target, where + ".demand.queueing.waitTarget", problems);
      sizing.wait_quantile = json_number(q, "waitQuantile");
      if (sizing.service_time_seconds <= 0 && !sizing.service_time.empty())
        problems.push_back(where + ".demand.queueing.serviceTime must be longer than 0");
      if (sizing.wait_quantile >= 1)
        problems.push_back(where + ".demand.queueing.waitQuantile must be below 1 (e.g. 0.99), or 0 for the mean wait");
      if (sizing.wait_quantile == 0 && sizing.wait_target_seconds == 0)
        problems.push_back(where + ".demand.queueing: a mean wait of 0 needs infinitely many replicas; give waitTarget > 0");
      signal.queueing = sizing;
    }
    signal.headroom_percent = json_number(d, "headroomPercent");
    signal.max_sample_age_seconds = json_integer(d, "maxSampleAgeSeconds");
    s.demand = signal;
  }
  return s;
}

ElasticPolicy elastic_policy_from(const json& e) {
  ElasticPolicy p;
  p.min_ranks = json_integer(e, "minRanks");
  if (e.contains("maxRanks")) p.max_ranks = json_integer(e, "maxRanks");
  p.grow_cooldown_seconds = json_integer(e, "growCooldownSeconds");
  p.min_growth_percent = json_number(e, "minGrowthPercent");
  return p;
}

json to_json(const BorrowSpec& s) {
  json w = {{"kind", s.workload.kind}};
  put_text(w, "name", s.workload.name);
  if (!s.workload.selector.empty()) w["selector"] = s.workload.selector;
  json out = {{"workload", w},
              {"minServingReplicas", s.min_serving_replicas},
              {"reclaimGraceSeconds", s.reclaim_grace_seconds},
              {"lendCooldownSeconds", s.lend_cooldown_seconds}};
  if (!s.windows.empty()) {
    out["windows"] = json::array();
    for (const LendingWindowSpec& win : s.windows)
      out["windows"].push_back({{"start", win.start}, {"end", win.end}, {"timeZone", win.time_zone}});
  }
  if (s.demand) {
    const DemandSignal& d = *s.demand;
    json prometheus = {{"query", d.prometheus.query}};
    put_text(prometheus, "url", d.prometheus.url);
    json demand = {{"prometheus", prometheus},
                   {"headroomPercent", d.headroom_percent},
                   {"maxSampleAgeSeconds", d.max_sample_age_seconds}};
    if (d.threshold) demand["threshold"] = *d.threshold;
    if (d.requests_per_replica) demand["requestsPerReplica"] = *d.requests_per_replica;
    if (d.queueing)
      demand["queueing"] = {{"serviceTime", d.queueing->service_time},
                            {"serversPerReplica", d.queueing->servers_per_replica},
                            {"waitTarget", d.queueing->wait_target},
                            {"waitQuantile", d.queueing->wait_quantile}};
    out["demand"] = demand;
  }
  return out;
}

json to_json(const ElasticPolicy& e) {
  json out = {{"minRanks", e.min_ranks},
              {"growCooldownSeconds", e.grow_cooldown_seconds},
              {"minGrowthPercent", e.min_growth_percent}};
  if (e.max_ranks) out["maxRanks"] = *e.max_ranks;
  return out;
}

void check_borrow_rules(const json& spec, std::vector<std::string>& problems) {
  const json pool = spec.value("pool", json::object());
  const json inference = pool.value("inference", json::array());
  for (size_t i = 0; i < inference.size(); ++i) {
    const json& e = inference[i];
    const std::string where = "spec.pool.inference[" + std::to_string(i) + "]";
    if (!e.contains("borrow")) {
      if (e.value("offPeakOnly", false))
        problems.push_back(where + ".offPeakOnly needs " + where + ".borrow: its windows or demand say when it is off peak");
      continue;
    }
    const json& b = e["borrow"];
    const json w = b.value("workload", json::object());
    const bool named = w.contains("name"), selected = w.contains("selector") && !w["selector"].empty();
    if (named == selected)
      problems.push_back(where + ".borrow.workload: set exactly one of name or selector");
    if (!b.contains("windows") && !b.contains("demand"))
      problems.push_back(where + ".borrow: say when lending is allowed: give windows, demand, or both");
    if (b.contains("demand")) {
      const json& d = b["demand"];
      const int sizings = int(d.contains("threshold")) + int(d.contains("requestsPerReplica")) + int(d.contains("queueing"));
      if (sizings != 1)
        problems.push_back(where + ".borrow.demand: set exactly one of threshold, requestsPerReplica or queueing, got " +
                           std::to_string(sizings));
    }
  }
  if (spec.contains("elasticPolicy")) {
    const json& e = spec["elasticPolicy"];
    if (e.contains("maxRanks") && e.value("minRanks", int64_t(1)) > e["maxRanks"].get<int64_t>())
      problems.push_back("spec.elasticPolicy: minRanks " + std::to_string(e.value("minRanks", int64_t(1))) +
                         " is above maxRanks " + std::to_string(e["maxRanks"].get<int64_t>()));
  }
}

}  // namespace qsync
