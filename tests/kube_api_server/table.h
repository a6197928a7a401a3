// File: tests/kube_api_server/table.h
// The meta.k8s.io/v1 Table the API server returns when `kubectl get` asks for
// `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`: column definitions and one row of cells
// per object. Without printer columns the columns are Name and Age; with a CRD version's
// additionalPrinterColumns they are Name then each column, evaluated by its simple JSONPath
// (`.status.phase`, `.spec.pool.training[0].count`); a "date" column renders as an age, as
// kubectl shows it ("5s", "3m", "2h", "4d").
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qsync::kube_test {

using json = nlohmann::json;

// `include_object` is the request's includeObject: "None" (rows carry no object), "Metadata"
// (a PartialObjectMetadata; also for "") or "Object" (the whole object); anything else throws
// std::invalid_argument. The returned metadata is empty: the caller sets resourceVersion (and
// continue) as for a list.
json table_for(const std::vector<json>& objects, const json& printer_columns, const std::string& include_object);

// A duration as kubectl prints an age (k8s.io/apimachinery/pkg/util/duration.HumanDuration):
// "45s", "3m20s" (under 10 minutes), "170m" (under 3 hours), "3h5m" (under 8 hours), "4d6h" (under 8 days), "400d" (under 2 years), "2y30d".
std::string kube_age(double seconds);

// The value at a simple JSONPath (`.a.b[0].c`, optionally wrapped in `{}` or starting with `$`),
// null when absent. Throws std::invalid_argument for a path it cannot read.
json json_path_get(const json& object, const std::string& path);

}  // namespace qsync::kube_test
