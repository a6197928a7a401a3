// File: kernels/cuda/layout_cuda.cu
// Transposes and padded copies (see layout_cuda.h).
#include "kernels/cuda/layout_cuda.h"

#include <climits>
#include <stdexcept>
#include <string>

#include "kernels/cuda/launch.cuh"

namespace qsync {
namespace {

using cuda_launch::as_stream;
using cuda_launch::launch_elementwise;

constexpr int TILE = 32, TILE_ROWS = 8;

// Grid (col tiles, row tiles, batch); each block moves one 32 x 32 tile through shared memory so
// that both the reads of src rows and the writes of dst rows are coalesced.
template <typename T>
__global__ void transpose_kernel(const T* src, T* dst, int64_t rows, int64_t cols, int64_t batch) {
  __shared__ T tile[TILE][TILE + 1];
  const int64_t row_tiles = (rows + TILE - 1) / TILE;
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const T* s = src + b * rows * cols;
    T* d = dst + b * rows * cols;
    for (int64_t ty = blockIdx.y; ty < row_tiles; ty += gridDim.y) {
      const int64_t r0 = ty * TILE, c0 = int64_t(blockIdx.x) * TILE;
      for (int k = threadIdx.y; k < TILE; k += TILE_ROWS) {
        const int64_t r = r0 + k, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[k][threadIdx.x] = s[r * cols + c];
      }
      __syncthreads();
      for (int k = threadIdx.y; k < TILE; k += TILE_ROWS) {
        const int64_t c = c0 + k, r = r0 + threadIdx.x;
        if (r < rows && c < cols) d[c * rows + r] = tile[threadIdx.x][k];
      }
      __syncthreads();
    }
  }
}

template <typename T>
void launch_transpose(const void* src, void* dst, int64_t batch, int64_t rows, int64_t cols, void* stream) {
  const int64_t col_tiles = (cols + TILE - 1) / TILE, row_tiles = (rows + TILE - 1) / TILE;
  const dim3 grid(unsigned(col_tiles), unsigned(std::min<int64_t>(row_tiles, 65535)),
                  unsigned(std::min<int64_t>(batch, 65535)));
  transpose_kernel<T><<<grid, dim3(TILE, TILE_ROWS), 0, as_stream(stream)>>>(static_cast<const T*>(src),
                                                                            static_cast<T*>(dst), rows, cols, batch);
  QSYNC_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
struct CopyPadded {
  const T* src; int64_t rows, cols, ld_src; T* dst; int64_t dst_cols, ld_dst;
  __device__ void operator()(int64_t i) const {
    const int64_t r = i / dst_cols, c = i % dst_cols;
    dst[r * ld_dst + c] = r < rows && c < cols ? src[r * ld_src + c] : T(0);
  }
};

template <typename T>
void launch_copy(const void* src, int64_t rows, int64_t cols, int64_t ld_src, void* dst, int64_t dst_rows,
                 int64_t dst_cols, int64_t ld_dst, void* stream) {
  launch_elementwise(CopyPadded<T>{static_cast<const T*>(src), rows, cols, ld_src, static_cast<T*>(dst), dst_cols, ld_dst},
                     dst_rows * dst_cols, stream);
}

[[noreturn]] void bad_elem(const char* what, int elem) {
  throw std::invalid_argument(std::string(what) + ": elements of " + std::to_string(elem) +
                              " bytes are not supported (1, 2 or 4)");
}

}  // namespace

void transpose_cuda(const void* src, void* dst, int64_t batch, int64_t rows, int64_t cols, int elem, void* stream) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return;
  if ((cols + TILE - 1) / TILE > int64_t(INT32_MAX))
    throw std::invalid_argument("transpose_cuda: " + std::to_string(cols) + " columns are too many for one grid");
  switch (elem) {
    case 1: return launch_transpose<uint8_t>(src, dst, batch, rows, cols, stream);
    case 2: return launch_transpose<uint16_t>(src, dst, batch, rows, cols, stream);
    case 4: return launch_transpose<uint32_t>(src, dst, batch, rows, cols, stream);
    default: bad_elem("transpose_cuda", elem);
  }
}

void copy_2d_padded_cuda(const void* src, int64_t rows, int64_t cols, int64_t ld_src, void* dst, int64_t dst_rows,
                         int64_t dst_cols, int64_t ld_dst, int elem, void* stream) {
  if (dst_rows < rows || dst_cols < cols || ld_dst < dst_cols || ld_src < cols)
    throw std::invalid_argument("copy_2d_padded_cuda: the destination (" + std::to_string(dst_rows) + ", " +
                                std::to_string(dst_cols) + ", ld " + std::to_string(ld_dst) +
                                ") must hold the source (" + std::to_string(rows) + ", " + std::to_string(cols) +
                                ", ld " + std::to_string(ld_src) + ")");
  switch (elem) {
    case 1: return launch_copy<uint8_t>(src, rows, cols, ld_src, dst, dst_rows, dst_cols, ld_dst, stream);
    case 2: return launch_copy<uint16_t>(src, rows, cols, ld_src, dst, dst_rows, dst_cols, ld_dst, stream);
    case 4: return launch_copy<uint32_t>(src, rows, cols, ld_src, dst, dst_rows, dst_cols, ld_dst, stream);
    default: bad_elem("copy_2d_padded_cuda", elem);
  }
}

}  // namespace qsync
