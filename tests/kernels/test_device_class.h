// File: tests/kernels/test_device_class.h
// The device class a test binary runs as: $QSYNC_TEST_DEVICE_CLASS, else the strongest CPU class
// here, with one thread (a class this CPU lacks runs as its fallback, the class the trainer would
// run it as). oneDNN's ISA cap must be set before the first kernel of the process, so every test
// calls this first; the CMake files register some binaries again under another class.
#pragma once

#include <cstdlib>

#include "kernels/device_class.h"

namespace qsync::testing {

inline const DeviceClass& activate_test_device_class() {
  const char* env = std::getenv("QSYNC_TEST_DEVICE_CLASS");
  const DeviceClass& c = device_class_fallback(device_class_by_name(env != nullptr && *env != '\0' ? env : "cpu-amx"));
  device_class_activate(c, 1);
  return c;
}

}  // namespace qsync::testing
