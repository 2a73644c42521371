// llama-oracle conversation MODEL.gguf TURNS_FILE [--swa-full] [--ctx-checkpoints N]
//     [--checkpoint-min-step N] [--parallel N] [--ctx N] [--threads N]
//
// Replays a conversation through one slot the way llama-server's prompt cache serves it (the facts
// are from tools/server/server-context.cpp of this llama.cpp commit; this is our own model of them):
// the slot keeps the previous turn's tokens and memory; a new prompt reuses their common prefix;
// where the sliding-window (SWA) cache no longer holds the window that the first new token needs
// (llama_memory_seq_pos_min above pos_next - n_swa), the newest usable context checkpoint (a copy
// of the SWA part of the memory) is restored, or, when none is, the whole prompt is processed again.
//
// TURNS_FILE: one line per turn, `PROMPT_IDS [| ANSWER_IDS [| USER_STARTS]]`:
//   PROMPT_IDS   the whole prompt of the turn (a chat client resends the whole history);
//   ANSWER_IDS   the ids the model generates after it, decoded one at a time into the memory as
//                llama-server's generation does (omit the final end-of-generation id: the server
//                samples it but never decodes it);
//   USER_STARTS  prompt positions where user messages start (llama-server's message spans: it also
//                checkpoints there); without them only the prompt-end checkpoints are made.
// Ids and positions are decimal, separated by commas or white space.
//
// llama-server's defaults are the defaults here: n_parallel auto (4 sequences, unified KV cache),
// n_ctx of the model's training context, n_batch 2048, n_ubatch 512, f16 KV, 32 context checkpoints
// at least 8192 tokens apart (except those at the last user message and near the prompt's end),
// SWA cache of the window (--swa-full: the full context, as llama-server --swa-full).
//
// Prints one JSON line: the settings and, per turn, prompt tokens, cached (reused) tokens,
// re-processed tokens, whether the whole prompt was processed again (started_over), the checkpoint
// restored (its n_tokens, -1 if none), and the checkpoints held afterwards (count and bytes).
#include "conversation.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "llama.h"
#include "oracle_common.h"

using namespace oracle;

namespace {

struct Turn {
  std::vector<llama_token> prompt;
  std::vector<llama_token> answer;
  std::vector<int> user_starts;
};

struct ServerSettings {
  bool swa_full = false;
  int ctx_checkpoints = 32;
  int checkpoint_min_step = 8192;
  int parallel = -1;  // -1: llama-server's auto (4 sequences, unified KV cache)
  int n_ctx = 0;      // 0: the model's training context
  int n_batch = 2048;
  int n_ubatch = 512;
  int threads = 2;
};

struct Checkpoint {
  int turn;
  int64_t n_tokens;
  llama_pos pos_min;
  llama_pos pos_max;
  std::vector<uint8_t> data;
};

struct TurnReport {
  int prompt = 0;
  int cached = 0;
  bool started_over = false;
  bool seq_rm_failed = false;
  int64_t checkpoint_restored = -1;
  llama_pos pos_min_before = -1;
  size_t checkpoints_held = 0;
  size_t checkpoint_bytes = 0;
};

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts(1);
  for (char c : text) {
    if (c == separator) parts.emplace_back();
    else parts.back() += c;
  }
  return parts;
}

std::vector<Turn> parse_turns(const std::string& text, int n_vocab) {
  std::vector<Turn> turns;
  int line_number = 0;
  for (const std::string& line : split(text, '\n')) {
    line_number++;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::vector<std::string> sections = split(line, '|');
    const std::string where = "turns file line " + std::to_string(line_number);
    if (sections.size() > 3) fail(where + ": more than 3 '|'-separated sections (PROMPT_IDS | ANSWER_IDS | USER_STARTS)");
    Turn turn;
    turn.prompt = parse_ids(sections[0]);
    if (turn.prompt.empty()) fail(where + ": the prompt holds no ids");
    if (sections.size() > 1) turn.answer = parse_ids(sections[1]);
    if (sections.size() > 2)
      for (llama_token p : parse_ids(sections[2])) turn.user_starts.push_back((int)p);
    for (const auto* ids : {&turn.prompt, &turn.answer})
      for (llama_token id : *ids)
        if (id < 0 || id >= n_vocab) fail(where + ": id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(n_vocab));
    for (int p : turn.user_starts)
      if (p > (int)turn.prompt.size()) fail(where + ": user start " + std::to_string(p) + " is past the prompt's " + std::to_string(turn.prompt.size()) + " ids");
    turns.push_back(std::move(turn));
  }
  if (turns.empty()) fail("the turns file holds no turns");
  return turns;
}

int common_prefix(const std::vector<llama_token>& a, const std::vector<llama_token>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) n++;
  return (int)n;
}

// One llama-server slot (seq 0) with its prompt cache: the tokens its memory holds and its context
// checkpoints.
class ServerSlot {
 public:
  ServerSlot(llama_context* ctx, const ServerSettings& settings, int n_swa)
      : ctx_(ctx), mem_(llama_get_memory(ctx)), settings_(settings), n_swa_(n_swa),
        batch_(llama_batch_init(settings.n_batch, 0, 1)) {}
  ~ServerSlot() { llama_batch_free(batch_); }
  ServerSlot(const ServerSlot&) = delete;
  ServerSlot& operator=(const ServerSlot&) = delete;

  TurnReport serve(int turn_index, const Turn& turn) {
    TurnReport report;
    report.prompt = (int)turn.prompt.size();
    report.pos_min_before = llama_memory_seq_pos_min(mem_, 0);
    const int n_past = reuse_prefix(turn.prompt, report);
    report.cached = n_past;
    process_prompt(turn_index, turn);
    generate(turn.answer);
    report.checkpoints_held = checkpoints_.size();
    for (const Checkpoint& c : checkpoints_) report.checkpoint_bytes += c.data.size();
    return report;
  }

 private:
  // How many of the prompt's first tokens the slot keeps (the server's n_past), the memory cut to them.
  int reuse_prefix(const std::vector<llama_token>& prompt, TurnReport& report) {
    const int n_prompt = (int)prompt.size();
    int n_past = common_prefix(tokens_, prompt);
    llama_pos pos_next = n_past;
    const bool has_new_tokens = n_past < n_prompt;
    // The oldest position the first new token still attends to.
    const llama_pos pos_min_thold = std::max(0, pos_next - n_swa_ - (has_new_tokens ? 0 : 1));
    if (n_past > 0) {
      const llama_pos pos_min = llama_memory_seq_pos_min(mem_, 0);
      if (pos_min >= pos_min_thold) {
        auto usable = std::find_if(checkpoints_.rbegin(), checkpoints_.rend(), [&](const Checkpoint& c) {
          return c.pos_max <= pos_next && (c.pos_min < pos_min_thold || c.pos_min == 0);
        });
        if (usable != checkpoints_.rend()) {
          if (llama_state_seq_set_data_ext(ctx_, usable->data.data(), usable->data.size(), 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) == 0)
            fail("llama_state_seq_set_data_ext could not restore the checkpoint at " + std::to_string(usable->n_tokens) + " tokens");
          pos_next = std::min(pos_next, std::max(usable->pos_min + 1, usable->pos_max));
          n_past = (int)std::min<int64_t>(pos_next, usable->n_tokens);
          report.checkpoint_restored = usable->n_tokens;
        } else {
          report.started_over = true;
          pos_next = 0;
          n_past = 0;
        }
      }
    }
    checkpoints_.erase(std::remove_if(checkpoints_.begin(), checkpoints_.end(), [&](const Checkpoint& c) { return c.pos_max > pos_next; }),
                       checkpoints_.end());
    // The last prompt token is always processed: its logits sample the answer.
    if (n_past == n_prompt && n_past > 0) n_past--;
    tokens_.resize(n_past);
    if (!llama_memory_seq_rm(mem_, 0, n_past, -1)) {
      // This server version asserts here (it relies on the pos_min check above); older ones started over.
      report.seq_rm_failed = true;
      report.started_over = true;
      llama_memory_seq_rm(mem_, 0, -1, -1);
      tokens_.clear();
      n_past = 0;
    }
    return n_past;
  }

  static bool is_user_start(const Turn& turn, int64_t pos) {
    return std::find(turn.user_starts.begin(), turn.user_starts.end(), pos) != turn.user_starts.end();
  }

  void process_prompt(int turn_index, const Turn& turn) {
    const int64_t n_prompt = (int64_t)turn.prompt.size();
    const int64_t last_user_pos = turn.user_starts.empty() ? -1 : *std::max_element(turn.user_starts.begin(), turn.user_starts.end());
    // Checkpoints keep what cannot be rolled back: the SWA cache (none with --swa-full, n_swa 0).
    const bool checkpoints_on = settings_.ctx_checkpoints > 0 && n_swa_ > 0;
    while ((int64_t)tokens_.size() < n_prompt) {
      batch_.n_tokens = 0;
      while ((int64_t)tokens_.size() < n_prompt && batch_.n_tokens < settings_.n_batch) {
        add_to_batch(turn.prompt[tokens_.size()], false);
        const int64_t n_tokens = (int64_t)tokens_.size();
        if (checkpoints_on && is_user_start(turn, n_tokens) &&
            (n_tokens == last_user_pos || checkpoints_.empty() || n_tokens > checkpoints_.back().n_tokens + settings_.checkpoint_min_step))
          break;
        // The prompt's last 4 + n_ubatch and last 4 tokens go in batches of their own, so that
        // checkpoints are made just before them (llama.cpp PR 20288).
        bool split_here = false;
        if (checkpoints_on)
          for (int offset : {4 + settings_.n_ubatch, 4})
            if (n_prompt == n_tokens + std::min(settings_.n_batch, offset)) split_here = true;
        if (split_here) break;
      }
      const int64_t n_tokens_cur = batch_.n_tokens;
      const int64_t n_tokens_start = (int64_t)tokens_.size() - n_tokens_cur;
      const bool near_prompt_end = n_prompt < (int64_t)tokens_.size() + settings_.n_ubatch;
      bool do_checkpoint = checkpoints_on;
      if ((int64_t)tokens_.size() == n_prompt) batch_.logits[batch_.n_tokens - 1] = 1;
      else if (!is_user_start(turn, n_tokens_start) && !near_prompt_end) do_checkpoint = false;
      const llama_pos pos_min = llama_memory_seq_pos_min(mem_, 0);
      const llama_pos pos_max = llama_memory_seq_pos_max(mem_, 0);
      do_checkpoint = do_checkpoint && pos_min >= 0 &&
                      (checkpoints_.empty() || n_tokens_start == last_user_pos || near_prompt_end ||
                       n_tokens_start > checkpoints_.back().n_tokens + settings_.checkpoint_min_step);
      // Made before the batch is decoded: the checkpoint holds the memory of the first n_tokens_start tokens.
      if (do_checkpoint) create_checkpoint(turn_index, n_tokens_start, pos_min, pos_max);
      decode();
    }
  }

  void generate(const std::vector<llama_token>& answer) {
    for (llama_token id : answer) {
      batch_.n_tokens = 0;
      add_to_batch(id, true);
      decode();
    }
  }

  void create_checkpoint(int turn_index, int64_t n_tokens, llama_pos pos_min, llama_pos pos_max) {
    const size_t most = (size_t)settings_.ctx_checkpoints;
    // When full: drop earlier turns' checkpoints within min-step of the one before them, then the oldest.
    int64_t last = -1;
    for (auto it = checkpoints_.begin(); checkpoints_.size() + 1 >= most && it != checkpoints_.end();) {
      if (it->turn != turn_index && last >= 0 && it->n_tokens <= last + settings_.checkpoint_min_step) {
        it = checkpoints_.erase(it);
        continue;
      }
      last = it->n_tokens;
      ++it;
    }
    while (checkpoints_.size() >= most) checkpoints_.erase(checkpoints_.begin());
    checkpoints_.erase(std::remove_if(checkpoints_.begin(), checkpoints_.end(), [&](const Checkpoint& c) { return c.n_tokens == n_tokens; }),
                       checkpoints_.end());
    Checkpoint checkpoint{turn_index, n_tokens, pos_min, pos_max, {}};
    checkpoint.data.resize(llama_state_seq_get_size_ext(ctx_, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY));
    if (llama_state_seq_get_data_ext(ctx_, checkpoint.data.data(), checkpoint.data.size(), 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) != checkpoint.data.size())
      fail("llama_state_seq_get_data_ext wrote a checkpoint of another size than it announced");
    checkpoints_.push_back(std::move(checkpoint));
  }

  void add_to_batch(llama_token id, bool logits) {
    const int i = batch_.n_tokens++;
    batch_.token[i] = id;
    batch_.pos[i] = (llama_pos)tokens_.size();
    batch_.n_seq_id[i] = 1;
    batch_.seq_id[i][0] = 0;
    batch_.logits[i] = logits;
    tokens_.push_back(id);
  }

  void decode() {
    const int rc = llama_decode(ctx_, batch_);
    if (rc != 0) fail("llama_decode failed (" + std::to_string(rc) + ") at " + std::to_string(tokens_.size()) + " tokens");
  }

  llama_context* ctx_;
  llama_memory_t mem_;
  ServerSettings settings_;
  int n_swa_;
  llama_batch batch_;
  std::vector<llama_token> tokens_;
  std::vector<Checkpoint> checkpoints_;
};

int integer_option(const std::vector<std::string>& args, size_t& i) {
  if (i + 1 >= args.size()) fail(args[i] + " needs a number");
  try {
    return std::stoi(args[++i]);
  } catch (const std::exception&) {
    fail(args[i - 1] + " needs a number, not '" + args[i] + "'");
  }
}

ServerSettings parse_settings(const std::vector<std::string>& args) {
  ServerSettings settings;
  for (size_t i = 2; i < args.size(); i++) {
    const std::string& flag = args[i];
    if (flag == "--swa-full") settings.swa_full = true;
    else if (flag == "--ctx-checkpoints") settings.ctx_checkpoints = integer_option(args, i);
    else if (flag == "--checkpoint-min-step") settings.checkpoint_min_step = integer_option(args, i);
    else if (flag == "--parallel") settings.parallel = integer_option(args, i);
    else if (flag == "--ctx") settings.n_ctx = integer_option(args, i);
    else if (flag == "--threads") settings.threads = integer_option(args, i);
    else fail("conversation: unknown option " + flag);
  }
  if (settings.ctx_checkpoints < 0 || settings.checkpoint_min_step < 0 || settings.n_ctx < 0 || settings.threads < 1 ||
      settings.parallel == 0 || settings.parallel < -1)
    fail("conversation: an option is out of range");
  return settings;
}

std::string turn_json(const TurnReport& r) {
  return "{\"prompt\":" + std::to_string(r.prompt) + ",\"cached\":" + std::to_string(r.cached) +
         ",\"reprocessed\":" + std::to_string(r.prompt - r.cached) + ",\"started_over\":" + (r.started_over ? "true" : "false") +
         ",\"seq_rm_failed\":" + (r.seq_rm_failed ? "true" : "false") + ",\"checkpoint_restored\":" + std::to_string(r.checkpoint_restored) +
         ",\"pos_min_before\":" + std::to_string(r.pos_min_before) + ",\"checkpoints_held\":" + std::to_string(r.checkpoints_held) +
         ",\"checkpoint_bytes\":" + std::to_string(r.checkpoint_bytes) + "}";
}

}  // namespace

int conversation_mode(const std::vector<std::string>& args) {
  if (args.size() < 2) fail("conversation: needs MODEL.gguf TURNS_FILE");
  const ServerSettings settings = parse_settings(args);
  llama_model* model = load_model(args[0]);
  const std::vector<Turn> turns = parse_turns(read_file(args[1]), llama_vocab_n_tokens(llama_model_get_vocab(model)));
  const int model_swa = llama_model_n_swa(model);
  // llama-server disables --swa-full on a model without sliding-window layers.
  const bool swa_full = settings.swa_full && model_swa > 0;
  const int n_swa = swa_full ? 0 : model_swa;

  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)settings.n_ctx;
  cp.n_batch = (uint32_t)settings.n_batch;
  cp.n_ubatch = (uint32_t)settings.n_ubatch;
  cp.n_seq_max = settings.parallel == -1 ? 4 : (uint32_t)settings.parallel;
  cp.kv_unified = settings.parallel == -1;
  cp.swa_full = swa_full;
  cp.n_threads = cp.n_threads_batch = settings.threads;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) fail("cannot create a llama.cpp context (LLAMA_ORACLE_VERBOSE=1 shows why)");
  const uint32_t n_ctx_seq = llama_n_ctx_seq(ctx);
  for (size_t t = 0; t < turns.size(); t++)
    if (turns[t].prompt.size() + turns[t].answer.size() > n_ctx_seq)
      fail("turn " + std::to_string(t + 1) + " needs " + std::to_string(turns[t].prompt.size() + turns[t].answer.size()) +
           " positions, more than the slot's context of " + std::to_string(n_ctx_seq) + " (--ctx)");

  std::string out;
  {
    ServerSlot slot(ctx, settings, n_swa);
    for (size_t t = 0; t < turns.size(); t++) out += (t ? "," : "") + turn_json(slot.serve((int)t, turns[t]));
  }
  printf("{\"n_swa\":%d,\"swa_full\":%s,\"ctx_checkpoints\":%d,\"checkpoint_min_step\":%d,\"n_seq_max\":%u,\"kv_unified\":%s,\"n_ctx_seq\":%u,\"turns\":[%s]}\n",
         model_swa, swa_full ? "true" : "false", settings.ctx_checkpoints, settings.checkpoint_min_step, cp.n_seq_max,
         cp.kv_unified ? "true" : "false", n_ctx_seq, out.c_str());
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
