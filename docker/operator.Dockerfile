# File: docker/operator.Dockerfile
# The qsync-operator image. Build stage: the Debian packages of scripts/install-deps.sh, then a CPU
# Release build of the operator alone. Runtime stage: Debian bookworm with only the shared
# libraries qsync-operator loads, run as the non-root user 65532 (the chart's runAsUser).
#   docker build -f docker/operator.Dockerfile -t qsync-operator:0.1.0 .
# x86-64 only: the build's CPU baseline is x86-64-v3 (AVX2), see QSYNC_X86_BASELINE.

FROM debian:bookworm AS build
COPY scripts/install-deps.sh /src/scripts/install-deps.sh
RUN /src/scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY CMakeLists.txt /src/
COPY cmake /src/cmake
COPY kernels /src/kernels
COPY planner /src/planner
COPY worker /src/worker
COPY runner /src/runner
COPY operator /src/operator
RUN cmake -S /src -B /src/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DQSYNC_ENABLE_CUDA=OFF -DQSYNC_BUILD_TESTING=OFF -DQSYNC_BUILD_BENCH=OFF -DQSYNC_BUILD_OPERATOR=ON \
 && cmake --build /src/build --target qsync-operator

FROM debian:bookworm-slim
# The operator's shared libraries: cpprestsdk and OpenSSL (the API client), yaml-cpp (kubeconfig),
# prometheus-cpp (metrics), oneDNN and OpenMP (the planner's kernels); CA certificates for TLS.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates libcpprest2.10 libssl3 libyaml-cpp0.7 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libdnnl2 libgomp1 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/bin/qsync-operator /usr/local/bin/qsync-operator
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/qsync-operator"]
