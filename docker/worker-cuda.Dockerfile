# File: docker/worker-cuda.Dockerfile
# The CUDA qsync-worker image: one rank of a HybridTrainingJob on an NVIDIA GPU (the GPU device
# classes gpu-t4 ... gpu-h200; it runs the CPU classes too). The CUDA 13 toolkit, cuDNN 9 and
# NCCL come from an NVIDIA CUDA image, named by the build argument CUDA_IMAGE (its glibc must not
# be newer than Debian bookworm's 2.36: the ubuntu22.04 images); everything else is the CPU
# image's (docker/worker.Dockerfile): Debian bookworm and the packages of scripts/install-deps.sh.
#   docker build -f docker/worker-cuda.Dockerfile -t qsync-worker-cuda:0.1.0 \
#     --build-arg CUDA_IMAGE=nvidia/cuda:13.0.1-cudnn-devel-ubuntu22.04 .
# Compiled for sm75 (T4), sm80 (A100), sm86 (A10), sm89 (L4) and sm90 (H100, H200): CUDA 13 does
# not compile for the V100. The NVIDIA container runtime provides the driver (libcuda) from the
# node; NVIDIA_DRIVER_CAPABILITIES asks it for compute.
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-cudnn-devel-ubuntu22.04
ARG CUDA_ARCHITECTURES="75;80;86;89;90"

FROM ${CUDA_IMAGE} AS cuda
# cuDNN's and NCCL's libraries and headers sit beside the toolkit's in one tree the stages copy.
RUN mkdir -p /opt/cuda-extra/lib /opt/cuda-extra/include \
 && cp -a /usr/lib/x86_64-linux-gnu/libcudnn* /usr/lib/x86_64-linux-gnu/libnccl* /opt/cuda-extra/lib/ \
 && cp -a /usr/include/cudnn*.h /usr/include/nccl*.h /opt/cuda-extra/include/

FROM debian:bookworm AS build
ARG CUDA_ARCHITECTURES
COPY scripts/install-deps.sh /src/scripts/install-deps.sh
RUN /src/scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY --from=cuda /usr/local/cuda /usr/local/cuda
COPY --from=cuda /opt/cuda-extra/lib/ /usr/local/cuda/lib64/
COPY --from=cuda /opt/cuda-extra/include/ /usr/local/cuda/include/
COPY CMakeLists.txt /src/
COPY cmake /src/cmake
COPY kernels /src/kernels
COPY planner /src/planner
COPY worker /src/worker
COPY runner /src/runner
RUN cmake -S /src -B /src/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DQSYNC_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
      "-DQSYNC_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}" \
      -DQSYNC_BUILD_TESTING=OFF -DQSYNC_BUILD_BENCH=OFF -DQSYNC_BUILD_OPERATOR=OFF \
 && cmake --build /src/build --target qsync-worker

FROM debian:bookworm-slim
# The CPU image's libraries (oneDNN, OpenMP, yaml-cpp, zlib, Gloo, prometheus-cpp), Fashion-MNIST,
# and CUDA's runtime libraries: cudart, cuBLAS(Lt), cuDNN (with its engine libraries), NCCL.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libdnnl2 libgomp1 libyaml-cpp0.7 zlib1g libgloo0 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
      dataset-fashion-mnist \
 && rm -rf /var/lib/apt/lists/*
COPY --from=cuda /usr/local/cuda/lib64/libcudart.so.13 /usr/local/cuda/lib64/libcublasLt.so.13 /usr/local/cuda/lib64/libcublas.so.13 /opt/cuda/lib/
COPY --from=cuda /opt/cuda-extra/lib/ /opt/cuda/lib/
COPY --from=build /src/build/bin/qsync-worker /usr/local/bin/qsync-worker
ENV LD_LIBRARY_PATH=/opt/cuda/lib \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 65532:65532
WORKDIR /tmp
EXPOSE 9100
ENTRYPOINT ["/usr/local/bin/qsync-worker"]
