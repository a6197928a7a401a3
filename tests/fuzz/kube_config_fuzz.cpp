// File: tests/fuzz/kube_config_fuzz.cpp
// Fuzzes kubeconfig files (operator/kube/kube_config.h: kube_config_from_file): contexts,
// clusters, users, base64 *-data fields. The `*-data` temp files the reader writes go to a
// private TMPDIR that is emptied now and then.
#include <cstdlib>
#include <filesystem>

#include "operator/kube/kube_config.h"
#include "tests/fuzz/fuzz_support.h"

namespace {
std::filesystem::path& private_tmp() {
  static std::filesystem::path dir;
  return dir;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  private_tmp() = std::filesystem::temp_directory_path() / ("qsync_fuzz_kube_" + std::to_string(::getpid()));
  std::filesystem::create_directories(private_tmp());
  ::setenv("TMPDIR", private_tmp().c_str(), 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static qsync::fuzz::ScratchFile file("kubeconfig");
  static size_t runs = 0;
  qsync::fuzz::expect_clear_errors("kube_config_from_file", [&] {
    const qsync::kube::KubeConfig c = qsync::kube::kube_config_from_file(file.write(data, size));
    (void)c.bearer_token();
  });
  if (++runs % 1000 == 0) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(private_tmp(), ec)) {
      if (entry.path().filename().string().rfind("qsync-kube-", 0) == 0) std::filesystem::remove(entry.path(), ec);
    }
  }
  return 0;
}
