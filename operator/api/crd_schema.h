// File: operator/api/crd_schema.h
// The HybridTrainingJob CustomResourceDefinition, generated from the field table
// (planner/job_fields.h, status_fields.h): the structural openAPIV3Schema with defaults, enums, bounds and CEL rules, the
// status subresource, and the printer columns `kubectl get htj` shows (Phase, Ranks, Predicted
// Step, Age). `qsync-crd-gen` prints hybrid_training_job_crd_yaml(); crds/ holds its output.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/status_fields.h"

namespace qsync::api {

// The schema of the object at `root` ("spec", "status") built from the fields under it. Throws
// std::logic_error when a field's parent is not in the table (a mistake in the table).
nlohmann::json schema_from_fields(const std::vector<Field>& fields, const std::string& root, const std::string& description);

// The whole object's openAPIV3Schema: apiVersion, kind, metadata, spec (required) and status.
nlohmann::json hybrid_training_job_schema();

// additionalPrinterColumns of the served version.
nlohmann::json hybrid_training_job_printer_columns();

// The apiextensions.k8s.io/v1 CustomResourceDefinition.
nlohmann::json hybrid_training_job_crd();

// The CRD as YAML, exactly what crds/qsync.dev_hybridtrainingjobs.yaml holds.
std::string hybrid_training_job_crd_yaml();

}  // namespace qsync::api
