// File: operator/reconciler/checkpoint_report.h
// status.lastCheckpointStep comes from the workers' termination messages: at exit a worker
// writes {"steps", "checkpointStep", "stoppedEarly", "error"} to /dev/termination-log and the
// kubelet puts it in the container's state.terminated.message (lastState after a restart).
//
// A gracefully deleted pod (suspend, cleanup, a restart's old attempt) shows that final status
// only between the kubelet's status write and the removal of the object, so a reconcile that
// runs later finds the pod gone. ReportedCheckpoints keeps what the pod informer saw last of
// each pod, per owning job: the reconciler takes the highest of the status, its live pods and
// this record, and never lowers the value.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

namespace qsync::reconciler {

// The checkpointStep of one termination message; -1 when the message is not a JSON
// object with a non-negative integer checkpointStep (a crash's log tail, an old worker).
int64_t checkpoint_step_of_message(const std::string& message);

// The highest checkpointStep in the pod's containers' state.terminated and lastState.terminated
// messages; 0 when none reports one.
int64_t reported_checkpoint_step(const nlohmann::json& pod);

// Thread-safe: the informer's thread observes, the reconcile workers read.
class ReportedCheckpoints {
 public:
  // Records the pod's reported step under the uid of its controlling owner (no owner: ignored).
  void observe(const nlohmann::json& pod);
  // The highest step observed for the job with this uid (0: none).
  int64_t step_for(const std::string& job_uid) const;
  void forget(const std::string& job_uid);

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> steps_;  // by job uid
};

}  // namespace qsync::reconciler
