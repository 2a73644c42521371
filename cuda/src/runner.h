// The runner's request handler: decodes one request body (PROTOCOL.md), validates it fully
// before touching any state, runs it on the Model and encodes the response body.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "frames.h"
#include "kv_blocks.h"
#include "model.h"

namespace ctxr {

enum Op : uint32_t { kInfo = 1, kAlloc = 2, kFree = 3, kCopy = 4, kForward = 5, kExport = 6, kImport = 7, kShutdown = 8, kMove = 9, kProfile = 10,
              kRelocate = 11, kKeySummary = 12, kKeyScores = 13 };
// FORWARD flags.
enum ForwardFlag : uint32_t { kForwardStats = 1, kForwardChunkMass = 2, kForwardEarlyStop = 4, kForwardGreedyRows = 8, kForwardExpertRoutes = 16,
                            kForwardSlidingIndices = 32 };
enum Status : uint32_t { kOk = 0, kBadRequest = 1, kOutOfBlocks = 2, kInternal = 3 };

class Runner {
 public:
  Runner(Model& model, std::string build)
      : model_(model),
        blocks_(model.num_blocks(), model.block_size()),
        sliding_(model.kv_groups().two_groups() ? model.sliding_blocks() : 0, model.block_size()),
        build_(std::move(build)) {}

  // Handles a request payload (op, id, body); returns the response payload (id, status, body).
  // Sets `shutdown` on SHUTDOWN.
  std::vector<uint8_t> handle(const std::vector<uint8_t>& request, bool& shutdown);
  std::string info_json() const;

 private:
  Model& model_;
  KvBlocks blocks_;   // group 0: every layer, or the global layers of a model with two groups
  KvBlocks sliding_;  // group 1: the sliding-window layers (no blocks with one group)
  std::string build_;

  bool two_groups() const { return model_.kv_groups().two_groups(); }
  // The pool of ALLOC/FREE's optional trailing group (0 when absent).
  KvBlocks& group_blocks(BodyReader& r, const char* op);
  // Ops that address whole blocks of one pool (COPY, MOVE, KEY_SUMMARY, KEY_SCORES) are refused with two groups.
  void refuse_with_two_groups(const char* op) const;
  // With two groups: the sliding table that follows a block table in EXPORT, IMPORT and RELOCATE
  // (kNoBlock or allocated blocks); empty with one group, where nothing follows.
  std::vector<int32_t> sliding_table_from(BodyReader& r, const char* op) const;
  // Sliding-pool slots of a span (every block of it held), checked.
  std::vector<int32_t> sliding_span_slots(const std::vector<int32_t>& table, uint32_t start, uint32_t count, const std::string& what) const;
  // The optional trailing KV-group mask of EXPORT and IMPORT (two groups only; default 3: both).
  int groups_from(BodyReader& r, const char* op) const;
  // A span's sliding slots must hold `positions` (what the global group holds there).
  void check_sliding_positions(const std::vector<int32_t>& sliding, const std::vector<int32_t>& positions, uint32_t start, const char* op) const;

  std::vector<uint8_t> dispatch(uint32_t op, const uint8_t* body, size_t size, bool& shutdown);
  std::vector<uint8_t> forward(const uint8_t* body, size_t size);
  std::vector<uint8_t> export_span(const uint8_t* body, size_t size);
  void import_span(const uint8_t* body, size_t size);
  void copy_blocks(const uint8_t* body, size_t size, bool move);
  void relocate(const uint8_t* body, size_t size);
  std::vector<uint8_t> key_summary(const uint8_t* body, size_t size);
  std::vector<uint8_t> key_scores(const uint8_t* body, size_t size);
  // The written slots of the listed blocks, in order: each slot, its position, and its index in
  // the list's slots (list index * block_size + offset).
  struct WrittenSlots {
    std::vector<int32_t> slots, positions, at;
  };
  WrittenSlots written_slots(const std::vector<int32_t>& ids) const;
  // The FORWARD statistics block of one sequence (flags bit 0, with bits 1 and 2), checked.
  void read_forward_stats(BodyReader& r, SequenceStep& s, uint32_t flags, const std::string& which) const;
  // Slots of sequence indices start..start+count-1 of `table`, checked.
  std::vector<int32_t> span_slots(const std::vector<int32_t>& table, uint32_t start, uint32_t count, const char* op) const;
};

}  // namespace ctxr
