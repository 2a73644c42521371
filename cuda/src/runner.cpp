#include "runner.h"

#include "greedy_row.h"
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "frames.h"
#include "greedy_row.h"
#include "json.h"

namespace ctxr {

namespace {

std::vector<int32_t> table_from(BodyReader& r, const KvBlocks& blocks, const char* op) {
  uint32_t nb = r.u32("the block count");
  std::vector<int32_t> table = r.i32s(nb, "the block table");
  blocks.check_allocated(table, op);
  return table;
}

// Slots of sequence indices start..start+count-1 of `table` in `blocks`' pool, checked: within the
// table, and (a sliding table) no block that has left the window.
std::vector<int32_t> pool_span_slots(const KvBlocks& blocks, const std::vector<int32_t>& table, uint32_t start, uint32_t count, const std::string& what) {
  uint64_t capacity = static_cast<uint64_t>(table.size()) * blocks.block_size();
  if (static_cast<uint64_t>(start) + count > capacity)
    throw BadRequest(what + ": span " + std::to_string(start) + "+" + std::to_string(count) + " exceeds the block table's " + std::to_string(capacity) + " slots");
  std::vector<int32_t> slots(count);
  for (uint32_t i = 0; i < count; i++) {
    const int index = static_cast<int>(start + i);
    if (table[index / blocks.block_size()] == kNoBlock)
      throw BadRequest(what + ": sequence index " + std::to_string(index) + " lies in a sliding block that has left the window (the span needs every block)");
    slots[i] = blocks.slot(table, index);
  }
  return slots;
}

// Where each new token sits in the sliding table: its own sliding index (FORWARD flags bit 5) or its index.
const std::vector<int32_t>& sliding_indices_of(const SequenceStep& s) { return s.sliding_indices.empty() ? s.indices : s.sliding_indices; }

}  // namespace

std::string Runner::info_json() const {
  const ModelConfig& c = model_.config();
  std::string s = "{";
  auto num = [&](const char* k, long long v) { s += json_quote(k) + ":" + std::to_string(v) + ","; };
  auto str = [&](const char* k, const std::string& v) { s += json_quote(k) + ":" + json_quote(v) + ","; };
  num("layers", c.layers);
  num("hidden", c.hidden);
  num("heads", c.heads);
  num("kv_heads", c.kv_heads);
  num("head_dim", c.head_dim);
  num("intermediate", c.intermediate);
  num("vocab", c.vocab);
  num("block_size", blocks_.block_size());
  num("num_blocks", blocks_.num_blocks());
  num("free_blocks", blocks_.free_count());
  num("max_position_embeddings", c.max_position_embeddings);
  str("device", model_.backend()->name());
  str("weight_dtype", model_.weight_dtype());
  str("compute_dtype", model_.backend()->matrix_dtype());
  str("kv_dtype", model_.kv_dtype_name());
  str("architecture", c.architecture);
  str("build", build_);
  // Per layer, the sliding-window length (0: global attention); the KV of a layer with a window
  // older than the window is never read again.
  s += json_quote("layer_windows") + ":[";
  for (int l = 0; l < c.layers; l++) s += (l ? "," : "") + std::to_string(model_.layer_window(l));
  s += "],";
  if (two_groups()) {
    // The KV cache groups (PROTOCOL.md, "KV cache groups"); absent with one group.
    const KvGroupLayout& g = model_.kv_groups();
    auto layer_list = [](const std::vector<int>& layers) {
      std::string out = "[";
      for (size_t i = 0; i < layers.size(); i++) out += (i ? "," : "") + std::to_string(layers[i]);
      return out + "]";
    };
    s += json_quote("kv_groups") + ":[{\"kind\":\"full_attention\",\"layers\":" + layer_list(g.full_layers) + ",\"num_blocks\":" +
         std::to_string(blocks_.num_blocks()) + ",\"free_blocks\":" + std::to_string(blocks_.free_count()) + "},{\"kind\":\"sliding_window\",\"sliding_window\":" +
         std::to_string(g.window) + ",\"layers\":" + layer_list(g.sliding_layers) + ",\"num_blocks\":" + std::to_string(sliding_.num_blocks()) +
         ",\"free_blocks\":" + std::to_string(sliding_.free_count()) + "}],";
  }
  s.back() = '}';
  return s;
}

KvBlocks& Runner::group_blocks(BodyReader& r, const char* op) {
  if (r.left() == 0) return blocks_;
  uint32_t group = r.u32("the KV group");
  if (group == 0) return blocks_;
  if (group == 1 && two_groups()) return sliding_;
  throw BadRequest(std::string(op) + ": KV group " + std::to_string(group) + " does not exist (the model has " + (two_groups() ? "2 groups" : "1 group") + ")");
}

void Runner::refuse_with_two_groups(const char* op) const {
  if (two_groups())
    throw BadRequest(std::string(op) + " is not supported on a model with sliding-window layers (two KV groups): it addresses whole blocks of one pool");
}

std::vector<int32_t> Runner::sliding_table_from(BodyReader& r, const char* op) const {
  if (!two_groups()) return {};
  uint32_t nb = r.u32("the sliding block count");
  std::vector<int32_t> table = r.i32s(nb, "the sliding block table");
  std::vector<int32_t> held;
  for (int32_t id : table)
    if (id != kNoBlock) held.push_back(id);
  sliding_.check_allocated(held, op);
  return table;
}

std::vector<int32_t> Runner::sliding_span_slots(const std::vector<int32_t>& table, uint32_t start, uint32_t count, const std::string& what) const {
  return pool_span_slots(sliding_, table, start, count, what + " (sliding group)");
}

void Runner::check_sliding_positions(const std::vector<int32_t>& sliding, const std::vector<int32_t>& positions, uint32_t start, const char* op) const {
  for (size_t i = 0; i < sliding.size(); i++) {
    const int32_t held = sliding_.position(sliding[i]);
    if (held == positions[i]) continue;
    const std::string index = std::to_string(start + i);
    if (held == KvBlocks::kUnwritten) throw BadRequest(std::string(op) + ": sequence index " + index + " has not been written in the sliding group");
    throw BadRequest(std::string(op) + ": sequence index " + index + " holds position " + std::to_string(held) + " in the sliding group but " + std::to_string(positions[i]) +
                     " in the global one");
  }
}

std::vector<uint8_t> Runner::handle(const std::vector<uint8_t>& request, bool& shutdown) {
  BodyWriter out;
  uint32_t op = 0, id = 0;
  if (request.size() >= 8) {
    std::memcpy(&op, request.data(), 4);
    std::memcpy(&id, request.data() + 4, 4);
  }
  out.u32(id);
  std::vector<uint8_t> body;
  uint32_t status = kOk;
  try {
    if (request.size() < 8) throw BadRequest("a request needs an op and an id (8 bytes)");
    body = dispatch(op, request.data() + 8, request.size() - 8, shutdown);
  } catch (const BadRequest& e) {
    status = kBadRequest;
    body.assign(e.what(), e.what() + std::strlen(e.what()));
  } catch (const OutOfBlocks& e) {
    status = kOutOfBlocks;
    body.assign(e.what(), e.what() + std::strlen(e.what()));
  } catch (const std::bad_alloc&) {
    status = kInternal;
    std::string m = "out of memory";
    body.assign(m.begin(), m.end());
  } catch (const std::exception& e) {
    status = kInternal;
    body.assign(e.what(), e.what() + std::strlen(e.what()));
  }
  out.u32(status);
  out.append(body.data(), body.size());
  return out.bytes;
}

std::vector<uint8_t> Runner::dispatch(uint32_t op, const uint8_t* body, size_t size, bool& shutdown) {
  BodyReader r(body, size);
  BodyWriter w;
  switch (op) {
    case kInfo: {
      std::string info = info_json();
      w.append(info.data(), info.size());
      return w.bytes;
    }
    case kAlloc: {
      uint32_t n = r.u32("the count");
      KvBlocks& pool = group_blocks(r, "ALLOC");
      r.end("ALLOC");
      if (n > static_cast<uint32_t>(pool.num_blocks())) throw OutOfBlocks("out of KV blocks: " + std::to_string(n) + " requested, the cache has " + std::to_string(pool.num_blocks()));
      std::vector<int32_t> ids = pool.alloc(static_cast<int>(n));
      w.u32(n);
      w.append(ids.data(), ids.size() * 4);
      return w.bytes;
    }
    case kFree: {
      uint32_t n = r.u32("the count");
      std::vector<int32_t> ids = r.i32s(n, "the block ids");
      KvBlocks& pool = group_blocks(r, "FREE");
      r.end("FREE");
      pool.free(ids);
      return w.bytes;
    }
    case kCopy:
    case kMove:
      copy_blocks(body, size, op == kMove);
      return w.bytes;
    case kForward:
      return forward(body, size);
    case kExport:
      return export_span(body, size);
    case kImport:
      import_span(body, size);
      return w.bytes;
    case kRelocate:
      relocate(body, size);
      return w.bytes;
    case kKeySummary:
      return key_summary(body, size);
    case kKeyScores:
      return key_scores(body, size);
    case kProfile: {
      uint32_t on = r.u32("the profiling switch");
      r.end("PROFILE");
      if (on > 1) throw BadRequest("PROFILE: the switch must be 0 or 1");
      ForwardProfile p = model_.take_profile();
      model_.set_profiling(on == 1);
      char json[512];
      std::snprintf(json, sizeof json,
                    "{\"calls\":%lld,\"tokens\":%lld,\"total_seconds\":%.9f,\"linear_seconds\":%.9f,\"linear_flops\":%.0f,"
                    "\"attention_seconds\":%.9f,\"attention_flops\":%.0f}",
                    p.calls, p.tokens, p.total_seconds, p.linear_seconds, p.linear_flops, p.attention_seconds, p.attention_flops);
      w.append(json, std::strlen(json));
      return w.bytes;
    }
    case kShutdown:
      r.end("SHUTDOWN");
      shutdown = true;
      return w.bytes;
    default:
      throw BadRequest("unknown op " + std::to_string(op));
  }
}

void Runner::copy_blocks(const uint8_t* body, size_t size, bool move) {
  const char* name = move ? "MOVE" : "COPY";
  refuse_with_two_groups(name);
  BodyReader r(body, size);
  uint32_t n = r.u32("the count");
  std::vector<int32_t> pairs = r.i32s(static_cast<size_t>(n) * 2 > UINT32_MAX ? UINT32_MAX : n * 2, "the block pairs");
  r.end(name);
  std::vector<int32_t> src, dst;
  for (uint32_t i = 0; i < n; i++) {
    src.push_back(pairs[2 * i]);
    dst.push_back(pairs[2 * i + 1]);
  }
  blocks_.check_allocated(src, name);
  blocks_.check_allocated(dst, name);
  std::vector<int32_t> sorted_dst(dst);
  std::sort(sorted_dst.begin(), sorted_dst.end());
  if (std::adjacent_find(sorted_dst.begin(), sorted_dst.end()) != sorted_dst.end()) throw BadRequest(std::string(name) + ": a destination block is listed twice");
  for (int32_t d : dst)
    if (std::find(src.begin(), src.end(), d) != src.end()) throw BadRequest(std::string(name) + ": block " + std::to_string(d) + " is both a source and a destination");
  if (move) {
    std::vector<int32_t> sorted_src(src);
    std::sort(sorted_src.begin(), sorted_src.end());
    if (std::adjacent_find(sorted_src.begin(), sorted_src.end()) != sorted_src.end()) throw BadRequest("MOVE: a source block is listed twice");
  }
  model_.backend()->kv_copy_blocks(src.data(), dst.data(), static_cast<int>(n));
  blocks_.copy(src, dst);
  if (move) blocks_.free(src);
}

std::vector<int32_t> Runner::span_slots(const std::vector<int32_t>& table, uint32_t start, uint32_t count, const char* op) const {
  return pool_span_slots(blocks_, table, start, count, op);
}

int Runner::groups_from(BodyReader& r, const char* op) const {
  if (r.left() == 0) return 3;
  uint32_t groups = r.u32("the KV groups");
  if (!two_groups()) throw BadRequest(std::string(op) + ": KV groups are given but the model has one group");
  if (groups < 1 || groups > 3) throw BadRequest(std::string(op) + ": KV groups must be 1 (global layers), 2 (sliding-window layers) or 3 (both), got " + std::to_string(groups));
  return static_cast<int>(groups);
}

std::vector<uint8_t> Runner::export_span(const uint8_t* body, size_t size) {
  BodyReader r(body, size);
  std::vector<int32_t> table = table_from(r, blocks_, "EXPORT");
  std::vector<int32_t> sliding_table = sliding_table_from(r, "EXPORT");
  uint32_t start = r.u32("start"), count = r.u32("count");
  const int groups = groups_from(r, "EXPORT");
  r.end("EXPORT");
  std::vector<int32_t> slots = groups & 1 ? span_slots(table, start, count, "EXPORT") : std::vector<int32_t>{};
  std::vector<int32_t> sliding = two_groups() && (groups & 2) ? sliding_span_slots(sliding_table, start, count, "EXPORT") : std::vector<int32_t>{};
  std::vector<int32_t> positions(count);
  const KvBlocks& first = groups & 1 ? blocks_ : sliding_;
  const std::vector<int32_t>& first_slots = groups & 1 ? slots : sliding;
  for (uint32_t i = 0; i < count; i++) {
    positions[i] = first.position(first_slots[i]);
    if (positions[i] == KvBlocks::kUnwritten)
      throw BadRequest("EXPORT: sequence index " + std::to_string(start + i) + " has not been written" + (groups & 1 ? "" : " in the sliding group"));
  }
  if ((groups & 3) == 3 && two_groups()) check_sliding_positions(sliding, positions, start, "EXPORT");
  std::vector<float> kv;
  model_.export_kv(slots, positions, kv, two_groups() ? &sliding : nullptr, groups);
  BodyWriter w;
  w.append(positions.data(), positions.size() * 4);
  w.append(kv.data(), kv.size() * 4);
  return w.bytes;
}

void Runner::import_span(const uint8_t* body, size_t size) {
  BodyReader r(body, size);
  std::vector<int32_t> table = table_from(r, blocks_, "IMPORT");
  std::vector<int32_t> sliding_table = sliding_table_from(r, "IMPORT");
  uint32_t start = r.u32("start"), count = r.u32("count");
  std::vector<int32_t> positions = r.i32s(count, "the positions");
  for (uint32_t i = 0; i < count; i++)
    if (positions[i] == KvBlocks::kUnwritten) throw BadRequest("IMPORT: position " + std::to_string(positions[i]) + " is reserved (it marks unwritten slots)");
  size_t floats = static_cast<size_t>(count) * model_.kv_width() * 2 * model_.config().layers;
  const float* data = r.floats(floats, "the K/V data");
  const int groups = groups_from(r, "IMPORT");
  r.end("IMPORT");
  std::vector<int32_t> slots = groups & 1 ? span_slots(table, start, count, "IMPORT") : std::vector<int32_t>{};
  std::vector<int32_t> sliding = two_groups() && (groups & 2) ? sliding_span_slots(sliding_table, start, count, "IMPORT") : std::vector<int32_t>{};
  model_.import_kv(slots, positions, data, two_groups() ? &sliding : nullptr, groups);
  for (size_t i = 0; i < slots.size(); i++) blocks_.set_position(slots[i], positions[i]);
  for (size_t i = 0; i < sliding.size(); i++) sliding_.set_position(sliding[i], positions[i]);
}

void Runner::read_forward_stats(BodyReader& r, SequenceStep& s, uint32_t flags, const std::string& which) const {
  uint32_t nq = r.u32("the query count");
  s.query_rows = r.i32s(nq, "the query rows");
  uint32_t nc = r.u32("the chunk count");
  if (nc == UINT32_MAX) throw BadRequest(which + ": too many chunks");
  s.chunk_bounds = r.i32s(nc + 1, "the chunk bounds");
  int len = 0;
  for (int32_t idx : s.indices) len = std::max(len, idx + 1);
  for (int32_t row : s.query_rows)
    if (row < 0 || static_cast<size_t>(row) >= s.tokens.size()) throw BadRequest(which + ": query row " + std::to_string(static_cast<uint32_t>(row)) + " is not one of its tokens");
  for (uint32_t c = 0; c < nc; c++)
    if (s.chunk_bounds[c] < 0 || s.chunk_bounds[c] >= s.chunk_bounds[c + 1]) throw BadRequest(which + ": chunk bounds must increase");
  if (nc > 0 && s.chunk_bounds[nc] > len) throw BadRequest(which + ": chunk bounds go beyond the sequence length " + std::to_string(len));
  if (static_cast<uint64_t>(nc) * nc > 1u << 24) throw BadRequest(which + ": too many chunks");
  if (!(flags & kForwardEarlyStop)) return;
  uint32_t window = r.u32("the early-stop window"), question = r.u32("the question chunk");
  if (window == 0) throw BadRequest(which + ": the early-stop window must be at least 1 layer");
  if (question >= nc) throw BadRequest(which + ": the question chunk " + std::to_string(question) + " is not one of its " + std::to_string(nc) + " chunks");
  s.stop_window = static_cast<int>(std::min<uint32_t>(window, INT32_MAX));
  s.question_chunk = static_cast<int>(question);
  // Tokens in another chunk may stop; logit rows must not be among them.
  auto chunk_of = [&](int32_t idx) {
    for (uint32_t c = 0; c < nc; c++)
      if (idx >= s.chunk_bounds[c] && idx < s.chunk_bounds[c + 1]) return static_cast<int>(c);
    return -1;
  };
  for (int32_t row : s.logit_rows) {
    int c = chunk_of(s.indices[row]);
    if (c >= 0 && c != s.question_chunk)
      throw BadRequest(which + ": logit row " + std::to_string(row) + " (index " + std::to_string(s.indices[row]) + ") lies in chunk " + std::to_string(c) +
                       ", which may stop early; logit rows must lie in the question chunk or outside every chunk");
  }
  // A token stops only where its slot already holds K/V at its position (what later layers keep);
  // a token on an unwritten slot runs every layer.
  s.may_stop.assign(s.tokens.size(), 0);
  for (size_t i = 0; i < s.tokens.size(); i++) {
    int c = chunk_of(s.indices[i]);
    if (c < 0 || c == s.question_chunk) continue;
    int32_t held = blocks_.position(blocks_.slot(s.table, s.indices[i]));
    if (held == KvBlocks::kUnwritten) continue;
    if (two_groups()) {
      // The sliding layers after the stop keep the sliding group's copy (check_sliding_table: its block is there).
      int32_t held_sliding = sliding_.position(sliding_.slot(s.sliding_table, s.indices[i]));
      if (held_sliding == KvBlocks::kUnwritten) continue;
      if (held == s.positions[i]) held = held_sliding;
    }
    if (held != s.positions[i])
      throw BadRequest(which + ": token " + std::to_string(i) + " may stop early but index " + std::to_string(s.indices[i]) + " holds position " + std::to_string(held) +
                       ", not its position " + std::to_string(s.positions[i]) + " (the layers after the stop would keep K rotated there)");
    s.may_stop[i] = 1;
  }
}

std::vector<uint8_t> Runner::forward(const uint8_t* body, size_t size) {
  BodyReader r(body, size);
  uint32_t flags = r.u32("flags");
  if (flags > (kForwardStats | kForwardChunkMass | kForwardEarlyStop | kForwardGreedyRows | kForwardExpertRoutes | kForwardSlidingIndices))
    throw BadRequest("FORWARD: unknown flags " + std::to_string(flags));
  const bool sliding_indices = flags & kForwardSlidingIndices;
  if (sliding_indices && !two_groups()) throw BadRequest("FORWARD: flags bit 5 (sliding indices) needs a model with two KV groups");
  if (sliding_indices && (flags & kForwardStats)) throw BadRequest("FORWARD: flags bit 5 (sliding indices) cannot go with bit 0 (attention statistics)");
  if ((flags & kForwardExpertRoutes) && !model_.config().moe.enabled()) throw BadRequest("FORWARD: flags bit 4 (expert routes) needs a mixture-of-experts model");
  if ((flags & kForwardExpertRoutes) && (flags & kForwardEarlyStop)) throw BadRequest("FORWARD: flags bit 4 (expert routes) cannot go with bit 2 (early stop)");
  if ((flags & (kForwardChunkMass | kForwardEarlyStop)) && !(flags & kForwardStats))
    throw BadRequest("FORWARD: flags bit 1 (chunk mass) and bit 2 (early stop) need bit 0 (attention statistics)");
  ForwardFlags mode;
  mode.stats = flags & kForwardStats;
  mode.chunk_mass = flags & kForwardChunkMass;
  mode.early_stop = flags & kForwardEarlyStop;
  mode.expert_routes = flags & kForwardExpertRoutes;
  uint32_t n_seqs = r.u32("the sequence count");
  if (n_seqs > r.left() / 16) throw BadRequest("request body ends before the sequences");
  const int vocab = model_.config().vocab;
  std::vector<SequenceStep> steps(n_seqs);
  for (uint32_t q = 0; q < n_seqs; q++) {
    SequenceStep& s = steps[q];
    std::string which = "FORWARD sequence " + std::to_string(q);
    s.table = table_from(r, blocks_, "FORWARD");
    if (two_groups()) {
      uint32_t nb = r.u32("the sliding block count");
      s.sliding_table = r.i32s(nb, "the sliding block table");
    }
    uint32_t n = r.u32("the token count");
    s.tokens = r.i32s(n, "the tokens");
    s.positions = r.i32s(n, "the positions");
    s.indices = r.i32s(n, "the indices");
    if (sliding_indices) s.sliding_indices = r.i32s(n, "the sliding indices");
    uint32_t nl = r.u32("the logit row count");
    s.logit_rows = r.i32s(nl, "the logit rows");
    uint64_t capacity = static_cast<uint64_t>(s.table.size()) * blocks_.block_size();
    for (uint32_t i = 0; i < n; i++) {
      if (s.tokens[i] < 0 || s.tokens[i] >= vocab) throw BadRequest(which + ": token id " + std::to_string(static_cast<uint32_t>(s.tokens[i])) + " is outside the vocab of " + std::to_string(vocab));
      if (s.indices[i] < 0 || static_cast<uint64_t>(s.indices[i]) >= capacity)
        throw BadRequest(which + ": index " + std::to_string(static_cast<uint32_t>(s.indices[i])) + " is beyond the block table's " + std::to_string(capacity) + " slots");
    }
    for (int32_t row : s.logit_rows)
      if (row < 0 || static_cast<uint32_t>(row) >= n) throw BadRequest(which + ": logit row " + std::to_string(static_cast<uint32_t>(row)) + " is not one of its " + std::to_string(n) + " tokens");
    std::vector<int32_t> sorted(s.indices);
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) throw BadRequest(which + ": two tokens write the same index");
    if (!s.sliding_indices.empty()) {
      for (uint32_t i = 0; i < n; i++)
        if (s.sliding_indices[i] < 0) throw BadRequest(which + ": sliding index " + std::to_string(static_cast<uint32_t>(s.sliding_indices[i])) + " is negative");
      std::vector<int32_t> sorted_sliding(s.sliding_indices);
      std::sort(sorted_sliding.begin(), sorted_sliding.end());
      if (std::adjacent_find(sorted_sliding.begin(), sorted_sliding.end()) != sorted_sliding.end()) throw BadRequest(which + ": two tokens write the same sliding index");
    }
    if (two_groups()) check_sliding_table(sliding_, s.sliding_table, sliding_indices_of(s), model_.kv_groups().window, which);
  }
  if (mode.stats)
    for (uint32_t q = 0; q < n_seqs; q++) read_forward_stats(r, steps[q], flags, "FORWARD statistics of sequence " + std::to_string(q));
  r.end("FORWARD");
  // Every entry a new token attends to must be written already or in this call.
  for (uint32_t q = 0; q < n_seqs; q++) {
    const SequenceStep& s = steps[q];
    if (s.tokens.empty()) continue;
    int len = *std::max_element(s.indices.begin(), s.indices.end()) + 1;
    std::vector<uint8_t> fresh(len, 0);
    for (int32_t idx : s.indices) fresh[idx] = 1;
    for (int e = 0; e < len; e++)
      if (!fresh[e] && blocks_.position(blocks_.slot(s.table, e)) == KvBlocks::kUnwritten)
        throw BadRequest("FORWARD sequence " + std::to_string(q) + ": index " + std::to_string(e) + " is attended to but has not been written");
    if (!two_groups()) continue;
    // The sliding layers read only the window before each new token, from the sliding pool.
    const std::vector<int32_t>& at = sliding_indices_of(s);
    const int lowest = *std::min_element(at.begin(), at.end());
    const int sliding_len = *std::max_element(at.begin(), at.end()) + 1;
    std::vector<uint8_t> sliding_fresh(sliding_len, 0);
    for (int32_t idx : at) sliding_fresh[idx] = 1;
    for (int e = std::max(0, lowest + 1 - model_.kv_groups().window); e < sliding_len; e++)
      if (!sliding_fresh[e] && sliding_.position(sliding_.slot(s.sliding_table, e)) == KvBlocks::kUnwritten)
        throw BadRequest("FORWARD sequence " + std::to_string(q) + ": index " + std::to_string(e) + " is in the sliding window but has not been written in the sliding group");
  }
  ForwardResult result = model_.forward(steps, mode);
  for (const SequenceStep& s : steps)
    for (size_t i = 0; i < s.tokens.size(); i++) {
      blocks_.set_position(blocks_.slot(s.table, s.indices[i]), s.positions[i]);
      if (two_groups()) sliding_.set_position(sliding_.slot(s.sliding_table, sliding_indices_of(s)[i]), s.positions[i]);
    }
  BodyWriter w;
  if (flags & kForwardGreedyRows) {
    for (size_t at = 0; at < result.logits.size(); at += static_cast<size_t>(vocab)) {
      const GreedyRow g = greedy_row(result.logits.data() + at, vocab);
      w.u32(static_cast<uint32_t>(g.token));
      w.append(&g.logit, 4);
    }
  } else {
    w.append(result.logits.data(), result.logits.size() * 4);
  }
  w.append(result.stats.data(), result.stats.size() * 4);
  for (const EarlyStop& e : result.early_stop) {
    w.u32(static_cast<uint32_t>(e.cutoff_layer));
    w.u32(static_cast<uint32_t>(e.focused.size()));
    for (int c : e.focused) w.u32(static_cast<uint32_t>(c));
  }
  if (flags & kForwardExpertRoutes) {
    w.u32(static_cast<uint32_t>(model_.config().moe.experts_used));
    w.append(result.routes.data(), result.routes.size() * 4);
  }
  return w.bytes;
}

void Runner::relocate(const uint8_t* body, size_t size) {
  BodyReader r(body, size);
  std::vector<int32_t> src_table = table_from(r, blocks_, "RELOCATE");
  std::vector<int32_t> src_sliding_table = sliding_table_from(r, "RELOCATE");
  uint32_t src_start = r.u32("the source start"), count = r.u32("the count");
  std::vector<int32_t> dst_table = table_from(r, blocks_, "RELOCATE");
  std::vector<int32_t> dst_sliding_table = sliding_table_from(r, "RELOCATE");
  uint32_t dst_start = r.u32("the destination start");
  std::vector<int32_t> positions = r.i32s(count, "the positions");
  r.end("RELOCATE");
  std::vector<int32_t> src = span_slots(src_table, src_start, count, "RELOCATE source");
  std::vector<int32_t> dst = span_slots(dst_table, dst_start, count, "RELOCATE destination");
  std::vector<int32_t> from(count);
  for (uint32_t i = 0; i < count; i++) {
    from[i] = blocks_.position(src[i]);
    if (from[i] == KvBlocks::kUnwritten) throw BadRequest("RELOCATE: source index " + std::to_string(src_start + i) + " has not been written");
    if (positions[i] == KvBlocks::kUnwritten) throw BadRequest("RELOCATE: position " + std::to_string(positions[i]) + " is reserved (it marks unwritten slots)");
  }
  std::vector<int32_t> sorted_src(src), sorted_dst(dst);
  std::sort(sorted_src.begin(), sorted_src.end());
  std::sort(sorted_dst.begin(), sorted_dst.end());
  if (std::adjacent_find(sorted_src.begin(), sorted_src.end()) != sorted_src.end()) throw BadRequest("RELOCATE: two source indices are the same slot (a block is listed twice)");
  if (std::adjacent_find(sorted_dst.begin(), sorted_dst.end()) != sorted_dst.end()) throw BadRequest("RELOCATE: two destination indices are the same slot (a block is listed twice)");
  for (uint32_t i = 0; i < count; i++)
    if (dst[i] != src[i] && std::binary_search(sorted_src.begin(), sorted_src.end(), dst[i]))
      throw BadRequest("RELOCATE: destination index " + std::to_string(dst_start + i) + " is the slot of another source entry; source and destination may overlap only in place (the same slots)");
  std::vector<int32_t> sliding_src, sliding_dst;
  if (two_groups()) {
    sliding_src = sliding_span_slots(src_sliding_table, src_start, count, "RELOCATE source");
    sliding_dst = sliding_span_slots(dst_sliding_table, dst_start, count, "RELOCATE destination");
    check_sliding_positions(sliding_src, from, src_start, "RELOCATE source");
    std::vector<int32_t> sorted_sliding_src(sliding_src), sorted_sliding_dst(sliding_dst);
    std::sort(sorted_sliding_src.begin(), sorted_sliding_src.end());
    std::sort(sorted_sliding_dst.begin(), sorted_sliding_dst.end());
    if (std::adjacent_find(sorted_sliding_src.begin(), sorted_sliding_src.end()) != sorted_sliding_src.end() ||
        std::adjacent_find(sorted_sliding_dst.begin(), sorted_sliding_dst.end()) != sorted_sliding_dst.end())
      throw BadRequest("RELOCATE: two indices are the same slot of the sliding group (a block is listed twice)");
    for (uint32_t i = 0; i < count; i++)
      if (sliding_dst[i] != sliding_src[i] && std::binary_search(sorted_sliding_src.begin(), sorted_sliding_src.end(), sliding_dst[i]))
        throw BadRequest("RELOCATE: destination index " + std::to_string(dst_start + i) + " is the sliding slot of another source entry; source and destination may overlap only in place");
    // In place in one group only would re-rotate the other group's copy from a position it no longer holds.
    for (uint32_t i = 0; i < count; i++)
      if ((dst[i] == src[i]) != (sliding_dst[i] == sliding_src[i]))
        throw BadRequest("RELOCATE: index " + std::to_string(dst_start + i) + " is in place in one KV group but not in the other");
  }
  model_.relocate_kv(src, from, dst, positions, two_groups() ? &sliding_src : nullptr, two_groups() ? &sliding_dst : nullptr);
  for (uint32_t i = 0; i < count; i++) blocks_.set_position(dst[i], positions[i]);
  for (size_t i = 0; i < sliding_dst.size(); i++) sliding_.set_position(sliding_dst[i], positions[i]);
}

Runner::WrittenSlots Runner::written_slots(const std::vector<int32_t>& ids) const {
  const int bs = blocks_.block_size();
  WrittenSlots w;
  for (size_t b = 0; b < ids.size(); b++) {
    for (int o = 0; o < bs; o++) {
      int32_t slot = ids[b] * bs + o;
      int32_t position = blocks_.position(slot);
      if (position == KvBlocks::kUnwritten) continue;
      w.slots.push_back(slot);
      w.positions.push_back(position);
      w.at.push_back(static_cast<int32_t>(b * bs + o));
    }
  }
  return w;
}

// KEY_SUMMARY and KEY_SCORES address blocks of the full group: with two KV groups they read the
// full-attention layers only (Model::for_each_unrotated_key), the sliding layers' rows are zeros.
std::vector<uint8_t> Runner::key_summary(const uint8_t* body, size_t size) {
  BodyReader r(body, size);
  uint32_t n = r.u32("the block count");
  std::vector<int32_t> ids = r.i32s(n, "the block ids");
  r.end("KEY_SUMMARY");
  blocks_.check_allocated(ids, "KEY_SUMMARY");
  const int bs = blocks_.block_size();
  WrittenSlots written = written_slots(ids);
  std::vector<int32_t> group;
  std::vector<uint32_t> counts(n, 0);
  for (int32_t at : written.at) {
    group.push_back(at / bs);
    counts[at / bs]++;
  }
  std::vector<float> means = model_.key_means(written.slots, written.positions, group, static_cast<int>(n));
  BodyWriter w;
  w.append(counts.data(), counts.size() * 4);
  w.append(means.data(), means.size() * 4);
  return w.bytes;
}

std::vector<uint8_t> Runner::key_scores(const uint8_t* body, size_t size) {
  BodyReader r(body, size);
  uint32_t n = r.u32("the block count");
  std::vector<int32_t> ids = r.i32s(n, "the block ids");
  const size_t width = static_cast<size_t>(model_.config().layers) * model_.kv_width();
  const float* anchor = r.floats(width, "the anchor");
  r.end("KEY_SCORES");
  blocks_.check_allocated(ids, "KEY_SCORES");
  for (size_t j = 0; j < width; j++)
    if (!std::isfinite(anchor[j])) throw BadRequest("KEY_SCORES: anchor value " + std::to_string(j) + " is not finite");
  WrittenSlots written = written_slots(ids);
  std::vector<float> dots = model_.key_dots(written.slots, written.positions, anchor);
  std::vector<float> scores(static_cast<size_t>(n) * blocks_.block_size(), -std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < written.at.size(); i++) scores[written.at[i]] = dots[i];
  BodyWriter w;
  w.append(scores.data(), scores.size() * 4);
  return w.bytes;
}

}  // namespace ctxr
