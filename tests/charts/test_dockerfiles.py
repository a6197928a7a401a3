# File: tests/charts/test_dockerfiles.py
# The container images docker/operator.Dockerfile, docker/worker.Dockerfile and
# docker/worker-cuda.Dockerfile (below), without docker: both stages are Debian bookworm, the build stage installs the packages of
# scripts/install-deps.sh by running it, every runtime package exists in Debian bookworm
# (apt-cache), the copied binary is one the build defines (qsync_cc_binary) and builds, the
# runtime packages provide every shared library the built binary needs (readelf + dpkg), and the
# image runs as the non-root user 65532.
# Built binaries are looked for in $QSYNC_BIN_DIR (ctest sets it to the build's bin/), else build/bin.
# Exit code 77 (ctest: skipped) when apt has no package lists (run apt-get update).
import functools
import glob
import os
import re
import shlex
import subprocess
import sys
import unittest

from chart_rendering import REPO_ROOT

IMAGES = {"operator": "qsync-operator", "worker": "qsync-worker"}
BIN_DIR = os.environ.get("QSYNC_BIN_DIR", os.path.join(REPO_ROOT, "build", "bin"))
SKIP_EXIT_CODE = 77


def parse_dockerfile(path):
    """The Dockerfile as stages: [{"from": image, "as": name, "instructions": [(KEYWORD, args)]}]."""
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"\\\n", " ", f.read())
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "ARG" and not stages:
            continue  # a build argument FROM may use (see build_args)
        if keyword == "FROM":
            words = args.split()
            stages.append({"from": words[0], "as": words[2] if len(words) > 2 else None, "instructions": []})
        else:
            stages[-1]["instructions"].append((keyword, args.strip()))
    return stages


def build_args(path):
    """{name: default} of the ARGs before the first FROM."""
    args = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.upper().startswith("FROM "):
                break
            if line.upper().startswith("ARG "):
                name, _, default = line[4:].partition("=")
                args[name.strip()] = default.strip().strip('"')
    return args


def apt_installed_packages(run_args):
    """Packages named by `apt-get install` in one RUN instruction."""
    packages = []
    for command in re.split(r"&&|;", run_args):
        words = shlex.split(command)
        if words[:2] == ["apt-get", "install"]:
            packages += [w for w in words[2:] if not w.startswith("-")]
    return packages


def apt_lists_present():
    result = subprocess.run(["apt-cache", "policy", "cmake"], capture_output=True, text=True)
    return result.returncode == 0 and "Candidate:" in result.stdout and "(none)" not in result.stdout


def cmake_binaries():
    """Names of every qsync_cc_binary in the project's CMake files (tests/ aside)."""
    names = set()
    for path in glob.glob(os.path.join(REPO_ROOT, "**", "CMakeLists.txt"), recursive=True):
        relative = os.path.relpath(path, REPO_ROOT)
        if relative.startswith(("build", "tests" + os.sep)):
            continue
        with open(path, encoding="utf-8") as f:
            names |= set(re.findall(r"qsync_cc_binary\(\s*NAME\s+([\w.-]+)", f.read()))
    return names


def needed_libraries(binary):
    """{soname: resolved path} of the libraries `binary` links directly (readelf NEEDED, ldd paths)."""
    output = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", output)
    resolved = {}
    for line in subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout.splitlines():
        match = re.match(r"\s*(\S+) => (\S+)", line)
        if match:
            resolved[match.group(1)] = match.group(2)
    return {soname: resolved.get(soname, soname) for soname in needed}


def owning_package(path):
    """The Debian package that ships the library at `path`, or None (not from a package). Tries
    the path with and without /usr (merged /usr: dpkg may record either)."""
    candidates = {path, os.path.realpath(path)}
    candidates |= {"/usr" + c for c in list(candidates) if not c.startswith("/usr/")}
    candidates |= {c[len("/usr"):] for c in list(candidates) if c.startswith("/usr/")}
    for candidate in sorted(candidates):
        result = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        if result.returncode == 0:
            return result.stdout.split(":", 1)[0].strip()
    return None


@functools.lru_cache(maxsize=None)
def dependency_closure(packages):
    """The packages plus everything they depend on, recursively (apt-cache)."""
    result = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
                             "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances",
                             *sorted(packages)], capture_output=True, text=True, check=True)
    closure = set(packages)
    for line in result.stdout.splitlines():
        line = line.strip()
        if line.startswith(("Depends:", "PreDepends:")):
            closure.add(line.split(":", 1)[1].strip().strip("<>").split(":")[0])
        elif line and not line.startswith(("|", "Depends", "PreDepends")) and ":" not in line:
            closure.add(line.strip("<>"))
    return closure


class DockerfileTest(unittest.TestCase):
    def check_image(self, image, binary_name):
        path = os.path.join(REPO_ROOT, "docker", f"{image}.Dockerfile")
        stages = parse_dockerfile(path)
        self.assertEqual(len(stages), 2, "a build stage and a runtime stage")
        build, runtime = stages
        for stage in stages:
            self.assertRegex(stage["from"], r"^debian:bookworm(-slim)?$")
        self.assertEqual(build["as"], "build")

        build_runs = " && ".join(a for k, a in build["instructions"] if k == "RUN")
        self.assertIn("/src/scripts/install-deps.sh", build_runs,
                      "the build stage installs the packages of scripts/install-deps.sh by running it")
        self.assertRegex(build_runs, rf"--target {re.escape(binary_name)}\b")
        self.assertIn("-DQSYNC_ENABLE_CUDA=OFF", build_runs)

        self.assertIn(binary_name, cmake_binaries(), f"no qsync_cc_binary(NAME {binary_name}) in the CMake files")
        copies = [a for k, a in runtime["instructions"] if k == "COPY"]
        self.assertEqual(copies, [f"--from=build /src/build/bin/{binary_name} /usr/local/bin/{binary_name}"])
        entrypoints = [a for k, a in runtime["instructions"] if k == "ENTRYPOINT"]
        self.assertEqual(entrypoints, [f'["/usr/local/bin/{binary_name}"]'])
        users = [a for k, a in runtime["instructions"] if k == "USER"]
        self.assertEqual(users, ["65532:65532"])
        self.assertEqual([k for k, _ in runtime["instructions"]][-1], "ENTRYPOINT")

        packages = [p for k, a in runtime["instructions"] if k == "RUN" for p in apt_installed_packages(a)]
        self.assertTrue(packages, "the runtime stage installs its libraries with apt-get install")
        shown = subprocess.run(["apt-cache", "show", "--no-all-versions", *packages],
                               capture_output=True, text=True)
        found = set(re.findall(r"^Package: (\S+)$", shown.stdout, re.MULTILINE))
        self.assertEqual(sorted(set(packages) - found), [],
                         f"not Debian bookworm packages (apt-cache show): {shown.stderr.strip()}")

        binary = os.path.join(BIN_DIR, binary_name)
        self.assertTrue(os.path.isfile(binary),
                        f"{binary} is not built: build the {binary_name} target (or set QSYNC_BIN_DIR)")
        closure = dependency_closure(frozenset(packages)) | dependency_closure(frozenset(["base-files", "apt"]))
        for library, library_path in needed_libraries(binary).items():
            package = owning_package(library_path)
            if package is None:
                # CUDA's libraries (cuBLASLt, cuDNN, NCCL) come with a CUDA build; the image builds with CUDA off.
                self.assertRegex(library, r"^lib(cuda|cudart|cublas|cublasLt|nvrtc|cudnn|nccl)\b",
                                 f"{binary_name} needs {library}, which no Debian package ships")
                continue
            self.assertIn(package, closure, f"{binary_name} needs {library} from {package}, which the "
                                            f"runtime stage of docker/{image}.Dockerfile does not install")

    def test_operator_image(self):
        self.check_image("operator", IMAGES["operator"])

    def test_worker_image(self):
        self.check_image("worker", IMAGES["worker"])

    def test_worker_cuda_image(self):
        """docker/worker-cuda.Dockerfile: CUDA's libraries from an NVIDIA image named by a build
        argument, the worker built with CUDA for the GPU classes' architectures (none below sm75:
        CUDA 13 cannot build for the V100) on Debian bookworm, and every library the CUDA build of
        qsync-worker needs either from the runtime stage's Debian packages or copied from CUDA."""
        path = os.path.join(REPO_ROOT, "docker", "worker-cuda.Dockerfile")
        args = build_args(path)
        self.assertRegex(args.get("CUDA_IMAGE", ""), r"^nvidia/cuda:13\.[0-9.]+-cudnn-devel-ubuntu22\.04$",
                         "CUDA 13 with cuDNN on a glibc no newer than bookworm's")
        archs = [int(a) for a in args.get("CUDA_ARCHITECTURES", "").split(";")]
        self.assertGreaterEqual(min(archs), 75)
        self.assertTrue({75, 80, 86, 89, 90} <= set(archs), archs)
        stages = parse_dockerfile(path)
        self.assertEqual([st["as"] for st in stages], ["cuda", "build", None])
        cuda, build, runtime = stages
        self.assertEqual(cuda["from"], "${CUDA_IMAGE}")
        self.assertEqual(build["from"], "debian:bookworm")
        self.assertEqual(runtime["from"], "debian:bookworm-slim")
        build_runs = " && ".join(a for k, a in build["instructions"] if k == "RUN")
        self.assertIn("/src/scripts/install-deps.sh", build_runs)
        self.assertIn("-DQSYNC_ENABLE_CUDA=ON", build_runs)
        self.assertRegex(build_runs, r"--target qsync-worker\b")
        copies = [a for k, a in runtime["instructions"] if k == "COPY"]
        self.assertIn("--from=build /src/build/bin/qsync-worker /usr/local/bin/qsync-worker", copies)
        env = " ".join(a for k, a in runtime["instructions"] if k == "ENV")
        self.assertIn("NVIDIA_DRIVER_CAPABILITIES=compute", env)
        self.assertIn("LD_LIBRARY_PATH=/opt/cuda/lib", env)
        self.assertEqual([a for k, a in runtime["instructions"] if k == "USER"], ["65532:65532"])
        self.assertEqual([k for k, _ in runtime["instructions"]][-1], "ENTRYPOINT")

        packages = [p for k, a in runtime["instructions"] if k == "RUN" for p in apt_installed_packages(a)]
        shown = subprocess.run(["apt-cache", "show", "--no-all-versions", *packages], capture_output=True, text=True)
        found = set(re.findall(r"^Package: (\S+)$", shown.stdout, re.MULTILINE))
        self.assertEqual(sorted(set(packages) - found), [], "not Debian bookworm packages")

        binary = os.path.join(BIN_DIR, "qsync-worker")
        if not os.path.isfile(binary):
            self.skipTest(f"{binary} is not built")
        libraries = needed_libraries(binary)
        if not any(name.startswith("libcudart") for name in libraries):
            self.skipTest(f"{binary} is a build without CUDA")
        copied = " ".join(copies)
        closure = dependency_closure(frozenset(packages)) | dependency_closure(frozenset(["base-files", "apt"]))
        for library, library_path in libraries.items():
            package = owning_package(library_path)
            if package is not None:
                self.assertIn(package, closure, f"qsync-worker needs {library} from {package}, which the runtime "
                                                "stage of docker/worker-cuda.Dockerfile does not install")
            elif re.match(r"^lib(cudnn|nccl)", library):
                self.assertIn("--from=cuda /opt/cuda-extra/lib/ /opt/cuda/lib/", copies, library)
            else:
                self.assertIn(library, copied, f"qsync-worker needs {library}, which the runtime stage does not copy")

    def test_parser_reads_apt_installs(self):
        self.assertEqual(apt_installed_packages("apt-get update && apt-get install -y --no-install-recommends "
                                                "a b && rm -rf x"), ["a", "b"])


if __name__ == "__main__":
    if not apt_lists_present():
        print("test_dockerfiles: apt has no package lists; run apt-get update (skipped)", file=sys.stderr)
        sys.exit(SKIP_EXIT_CODE)
    unittest.main(verbosity=2)
