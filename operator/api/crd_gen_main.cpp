// File: operator/api/crd_gen_main.cpp
// qsync-crd-gen: prints the HybridTrainingJob CustomResourceDefinition YAML generated from the
// field table. crds/qsync.dev_hybridtrainingjobs.yaml is its committed output (a test checks):
//   build/bin/qsync-crd-gen > crds/qsync.dev_hybridtrainingjobs.yaml
#include <cstring>
#include <iostream>

#include "operator/api/crd_schema.h"

int main(int argc, char** argv) {
  if (argc > 1) {
    const bool help = std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0;
    (help ? std::cout : std::cerr) << "usage: qsync-crd-gen > crds/qsync.dev_hybridtrainingjobs.yaml\n"
                                      "Prints the HybridTrainingJob CRD (apiextensions.k8s.io/v1) as YAML.\n";
    return help ? 0 : 2;
  }
  std::cout << qsync::api::hybrid_training_job_crd_yaml();
  return std::cout.good() ? 0 : 1;
}
