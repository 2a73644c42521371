// Paged attention for the CPU backend (AVX2 + FMA, OpenMP). Semantics are those of
// Backend::attention (backend.h): token t of the batch attends to entries 0..token_len[t]-1 of
// its sequence, entry s living in row table[s / block_size] * block_size + s % block_size of the
// layer's K and V caches ([num_blocks * block_size][kv_width] float32 or IEEE half, kv head j at
// columns j*head_dim .. j*head_dim+head_dim-1). A half cache is widened in registers on the
// per-token path (decode reads half the bytes); the tile, statistics and plain paths widen each
// K/V chunk into scratch and then run the f32 code, so both caches give the same results on the
// same (half-representable) values.
//
// Paths:
//   prefill tiles  consecutive tokens of one sequence (up to ~64 query rows = tokens x the query
//                  heads sharing a kv head) against 64-entry K/V chunks: an AVX2 micro-GEMM for
//                  the scores (transposed, so rows are vector lanes), online softmax per row
//                  (running max and sum, accumulator rescaled), a micro-GEMM for P·V; each row is
//                  masked at its own causal length.
//   per token      single tokens (decode, or runs too short for a tile): every head at once, so
//                  each K/V row is read whole and once (a kv head's slice of the rows alone
//                  streams from memory at a fraction of the bandwidth); scores, softmax, P·V.
//                  With few such tokens, long ones are split into parts of >= 256 entries merged
//                  afterwards (the split depends on the batch only: results do not depend on the
//                  thread count).
//   statistics     tokens with a statistics row (stat_row[t] >= 0; rows distinct) get the
//                  head-averaged probabilities from an extra pass that writes no output (the
//                  output is bitwise the same with and without statistics): tiles of a
//                  sequence's statistics tokens, all kv heads, scores by the prefill micro-GEMM
//                  computed twice (max and sum per row, then the probabilities). In chunk
//                  mode (AttentionBatch::stat_chunk_of) the prefill tiles sum their own
//                  probabilities per chunk and head as they go (accumulators rescaled with the
//                  running max), so statistics tokens inside tiles cost no extra pass; the
//                  others take the pass above.
// Attention sinks (AttentionBatch::sinks) join every path's softmax sum at the end, where its
// running max is known: sum + exp(sink - max · scale).
// head_dim not a multiple of 8 uses the plain path for every token.
#pragma once
#include <cstdint>

#include "backend.h"

namespace ctxr {

void cpu_attention(const float* q, int q_stride, const AttentionBatch& batch, const float* k_cache, const float* v_cache,
                   int kv_width, int block_size, int threads, float* out);
void cpu_attention(const float* q, int q_stride, const AttentionBatch& batch, const uint16_t* k_cache, const uint16_t* v_cache,
                   int kv_width, int block_size, int threads, float* out);

}  // namespace ctxr
