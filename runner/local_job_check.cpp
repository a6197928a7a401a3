// File: runner/local_job_check.cpp
// The up-front checks of a local job (local_job_check.h).
#include "runner/local_job_check.h"

#include <filesystem>
#include <stdexcept>

#include "planner/local_plan.h"

namespace qsync {
namespace {

std::string worker_field(size_t r, const char* field) {
  return "spec.pool.local[" + std::to_string(r) + "]." + field;
}

void check_class(const JobFile& job, size_t r, LocalJobCheck& out, std::vector<std::string>& problems) {
  const std::string& name = job.spec.pool.local[r].device_class;
  const DeviceClass* c = nullptr;
  try {
    c = &device_class_by_name(name);
  } catch (const std::invalid_argument& e) {
    problems.push_back(worker_field(r, "deviceClass") + ": " + e.what());
    out.classes.push_back(nullptr);
    return;
  }
  out.classes.push_back(c);
  if (c->kind == DeviceKind::CPU) return;  // a CPU class this CPU lacks runs as the closest one it has
  const DeviceAvailability av = device_class_availability(*c);
  if (!av.available)
    problems.push_back(worker_field(r, "deviceClass") + ": " + name + " is a GPU class and cannot run here (" + av.note +
                       "); `qsync run` runs CPU classes on this machine (e.g. cpu-avx2, cpu-sse41): list GPU ranks in "
                       "spec.pool.training or spec.pool.inference and run the job with the operator");
}

void check_data(const JobFile& job, const ModelDesc& model, std::vector<std::string>& problems) {
  const std::string& path = job.spec.data.path;
  if (!path.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      problems.push_back("spec.data.path: " + path + " does not exist; point it at " +
                         (model.input_kind == InputKind::IMAGE ? std::string("a Fashion-MNIST folder (IDX files)")
                                                                : std::string("a text file")) +
                         (model.input_kind == InputKind::IMAGE
                              ? " such as /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist)"
                              : " such as /usr/share/common-licenses/GPL-3"));
  } else if (model.input_kind == InputKind::TOKENS) {
    problems.push_back("spec.data.path is missing: model '" + model.name +
                       "' reads characters; set data: {path: FILE} (any text file, e.g. /usr/share/common-licenses/GPL-3)");
  }
}

}  // namespace

LocalJobCheck check_local_job(const JobFile& job) {
  LocalJobCheck out;
  std::vector<std::string> problems = job_file_local_problems(job);
  if (!problems.empty()) {  // without local workers nothing below applies
    std::string all;
    for (const std::string& p : problems) all += "\n  " + p;
    throw std::invalid_argument(job.source + ": the job cannot run locally:" + all);
  }
  try {
    out.model = model_desc_find(job.model_reference());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(job.source + ": spec.model: " + e.what());
  }
  for (size_t r = 0; r < job.spec.pool.local.size(); ++r) check_class(job, r, out, problems);
  check_data(job, out.model, problems);
  for (const std::string& p : local_memory_budget_problems(job, out.model)) problems.push_back(p);
  if (!problems.empty()) {
    std::string all;
    for (const std::string& p : problems) all += "\n  " + p;
    throw std::invalid_argument(job.source + ": the job cannot run here:" + all);
  }
  return out;
}

}  // namespace qsync
