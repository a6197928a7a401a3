// File: kernels/cuda/embedding_cuda.h
// CUDA token + learned-position embeddings (the CUDA side of the CPU's Embedding ops). The token
// table's gradient is deterministic and in the CPU's order: the positions are stably sorted by
// token id (CUB radix sort), and one thread per (token, channel) adds its positions in (b, t)
// order, starting from the table's value, as the CPU's loop does. A plain C++ header: `stream`
// is a cudaStream_t as void*; device pointers; enqueue only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qsync {

// ids[i] = int32(x[i]) for token ids given as floats; an id that is not an integer in
// [0, vocab) becomes 0 and lowers *first_bad to its index (initialize *first_bad to UINT64_MAX;
// the caller reads it after synchronizing and names the position).
void embedding_ids_cuda(const float* x, int32_t* ids, int64_t n, int64_t vocab, unsigned long long* first_bad,
                        void* stream);
// y (B, T, C) = wte[ids[b, t]] + wpe[t]
void embedding_forward_cuda(const int32_t* ids, const float* wte, const float* wpe, float* y, int64_t batch,
                            int64_t tokens, int64_t C, void* stream);
// Scratch bytes of embedding_backward_cuda for `positions` = B * T ids.
size_t embedding_backward_scratch_bytes(int64_t positions, int64_t vocab);
// dwte[ids[i]] += dy[i] (i in (b, t) order per row); dwpe[t] += sum over b of dy[b, t] (b in order).
void embedding_backward_cuda(const float* dy, const int32_t* ids, int64_t batch, int64_t tokens, int64_t C,
                             int64_t vocab, float* dwte, float* dwpe, void* scratch, size_t scratch_bytes, void* stream);

}  // namespace qsync
