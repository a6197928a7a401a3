#!/usr/bin/env bash
# Installs the Debian packages QSync builds and tests with, only those that are missing.
# Usage: scripts/install-deps.sh   (as root, or with sudo available)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libdnnl-dev ocl-icd-opencl-dev opencl-headers libopenblas-dev nlohmann-json3-dev libgtest-dev zlib1g-dev
  libyaml-cpp-dev libgloo-dev prometheus-cpp-dev libcpprest-dev
  dataset-fashion-mnist prometheus
  fortunes  # English text corpus for the char-GPT: quotation files under /usr/share/games/fortunes/
  # clang with libFuzzer and the sanitizer runtimes (scripts/fuzz.sh, scripts/sanitize.sh, CI's
  # fuzz step); llvm for llvm-symbolizer (readable sanitizer stacks); libomp-dev: OpenMP for clang.
  clang libclang-rt-dev libomp-dev llvm
)
# kubectl drives the Kubernetes API test server's conformance test; Debian ships it as kubernetes-client.
command -v kubectl >/dev/null 2>&1 || packages+=(kubernetes-client)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
