// File: worker/device_report.h
// `qsync-worker devices`: what this process can compute on, for people and for the GPU check
// script: the build's CUDA support, the visible CUDA devices with their device classes (the one
// naming of kernels/device_class.h), the libraries' versions (CUDA runtime and driver, cuBLASLt,
// cuDNN, NCCL), and with --bench the GEMM throughput of each precision the device's class runs,
// on the training engine's own cuBLASLt wrapper, beside the datasheet's dense peak.
//
//   qsync-worker devices [--bench] [--size N (GEMM M = N = K, default 8192)] [--iterations I]
//                        [--json FILE]
#pragma once

#include <cstdint>
#include <string>

namespace qsync {

struct DeviceReportConfig {
  bool bench = false;
  int64_t size = 8192;
  int iterations = 20;
  std::string json;  // also written as JSON here when set
};

extern const char* const DEVICES_USAGE;
DeviceReportConfig device_report_parse_args(int argc, char** argv);
// Prints the report; returns its JSON text.
std::string device_report_run(const DeviceReportConfig& c);

}  // namespace qsync
