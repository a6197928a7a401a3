// File: operator/api/group_version.h
// The HybridTrainingJob's names in the API: group, version, kind, plural and the rest, for the
// CRD generator, the operator's client calls and its RBAC.
#pragma once

#include "planner/job_spec.h"

namespace qsync::api {

inline constexpr const char* GROUP = "qsync.dev";
inline constexpr const char* VERSION = "v1alpha1";
inline constexpr const char* API_VERSION = JOB_API_VERSION;
inline constexpr const char* KIND = JOB_KIND;
inline constexpr const char* LIST_KIND = "HybridTrainingJobList";
inline constexpr const char* PLURAL = "hybridtrainingjobs";
inline constexpr const char* SINGULAR = "hybridtrainingjob";
inline constexpr const char* SHORT_NAME = "htj";
inline constexpr const char* CATEGORY = "qsync";
inline constexpr const char* CRD_NAME = "hybridtrainingjobs.qsync.dev";
// spec.runPolicy.managedBy's default: jobs with another value belong to another controller.
inline constexpr const char* OPERATOR_MANAGER = JOB_DEFAULT_MANAGER;

}  // namespace qsync::api
