# File: docker/worker.Dockerfile
# The qsync-worker image: one rank of a HybridTrainingJob. Build stage: the Debian packages of
# scripts/install-deps.sh, then a CPU Release build of qsync-worker. Runtime stage: Debian
# bookworm with only the shared libraries qsync-worker loads, plus Fashion-MNIST
# (/usr/share/datasets/fashion-mnist, the examples' data), run as the non-root user 65532.
#   docker build -f docker/worker.Dockerfile -t qsync-worker:0.1.0 .
# CPU device classes only: CUDA is off (Debian bookworm has no CUDA toolkit); x86-64-v3 baseline.

FROM debian:bookworm AS build
COPY scripts/install-deps.sh /src/scripts/install-deps.sh
RUN /src/scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY CMakeLists.txt /src/
COPY cmake /src/cmake
COPY kernels /src/kernels
COPY planner /src/planner
COPY worker /src/worker
COPY runner /src/runner
RUN cmake -S /src -B /src/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DQSYNC_ENABLE_CUDA=OFF -DQSYNC_BUILD_TESTING=OFF -DQSYNC_BUILD_BENCH=OFF -DQSYNC_BUILD_OPERATOR=OFF \
 && cmake --build /src/build --target qsync-worker

FROM debian:bookworm-slim
# The worker's shared libraries: oneDNN and OpenMP (kernels), yaml-cpp (job and model files),
# zlib (gzipped datasets), Gloo (the gradient all-reduce), prometheus-cpp (/metrics on 9100).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libdnnl2 libgomp1 libyaml-cpp0.7 zlib1g libgloo0 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
      dataset-fashion-mnist \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/bin/qsync-worker /usr/local/bin/qsync-worker
USER 65532:65532
WORKDIR /tmp
EXPOSE 9100
ENTRYPOINT ["/usr/local/bin/qsync-worker"]
