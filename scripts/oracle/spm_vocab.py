"""SentencePiece ("llama"-model) vocabularies laid out as llama.cpp's converter writes Gemma 3's and Phi-3's.

Facts followed (llama.cpp conversion/base.py _create_vocab_sentencepiece, conversion/phi.py
Phi3MiniModel.set_vocab, conversion/gemma.py Gemma3Model.set_vocab, and the real Phi-3 vocabulary
in llama.cpp's models/ggml-vocab-phi-3.gguf):
- pieces spell spaces as ▁; a SentencePiece BPE model scores its pieces by merge rank (-1, -2, ...),
  single characters after every merge, byte pieces <0x00>..<0xFF> (type BYTE) and control pieces 0;
  runs of ▁ that Llama 2's model adds by hand score -1e9 (ties: the order of equal-score merges matters);
- pieces the model card adds (tokenizer_config's added_tokens_decoder) score -1000: CONTROL when
  "special", else USER_DEFINED with ▁ written back as spaces ("pre-normalize user-defined spaces");
- ids past the pieces up to the model's vocab_size are "[PAD<id>]", UNUSED, -10000 (Phi-3's file has
  them as UNKNOWN, -10000, since its tokenizer.json lists them);
- Gemma 3: <pad> 0, <eos> 1, <bos> 2, <unk> 3, then control pieces, add_bos true, add_space_prefix false,
  "\\n" and "\\t" are pieces; Phi-3: <unk> 0, <s> 1, </s> 2, bytes at 3..258, its chat tokens 32000.., eos
  <|endoftext|>, add_bos as the card says, no add_space_prefix key (llama.cpp's SPM default: true),
  no newline piece (newlines are byte pieces).

The pieces are learned, deterministically and in well under a second, by byte-pair merges over
SAMPLE (English, code, CJK): a real SentencePiece BPE vocabulary is closed under merges the same way;
once the sample's words are whole pieces, its most frequent other substrings fill the vocabulary up
to a few thousand pieces (overlapping candidates with distinct scores, and pieces no merge reaches).
"""
import re
from collections import Counter, defaultdict

SPACE = "\u2581"
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

SAMPLE = """
The quick brown fox jumps over the lazy dog. They were here at the station when the train came in,
and the people on the platform turned to look at the clock. It's three o'clock; we'll be late again!
A tokenizer splits text into pieces: words, parts of words, single characters and bytes. Merges
join the most frequent pairs first, so common words such as "the", "and", "that" and "with" become
one piece, while rare words are spelled out from smaller pieces. Numbers like 2024, 3.14159 and
1,000,000 appear in reports; so do dates (2026-11-28), times (09:30) and prices ($19.99, 42 EUR).
Question: what is the answer to the question? Answer: the answer is in the document above.
Please summarize the following article in three sentences and list the main points.
I think therefore I am. To be, or not to be: that is the question. All that glitters is not gold.
In the beginning the universe was created. This has made a lot of people very angry and been
widely regarded as a bad move. Once upon a time there was a little house in the middle of a forest.

def tokenize(text: str, vocab: dict[str, int]) -> list[int]:
    ids = []
    for word in text.split():
        if word in vocab:
            ids.append(vocab[word])
        else:
            ids.extend(vocab.get(ch, 0) for ch in word)
    return ids

function mergePairs(symbols, ranks) {
  let best = null;
  for (let i = 0; i + 1 < symbols.length; i++) {
    const rank = ranks.get(symbols[i] + " " + symbols[i + 1]);
    if (rank !== undefined && (best === null || rank < best.rank)) best = { i, rank };
  }
  return best;
}

for (int i = 0; i < n; ++i) { sum += values[i] * weights[i]; }
SELECT name, count(*) FROM users WHERE created_at > '2024-01-01' GROUP BY name ORDER BY 2 DESC;
<html><body><h1>Title</h1><p>A paragraph with <b>bold</b> and <i>italic</i> text.</p></body></html>

東京は日本の首都です。今日はいい天気ですね。私は毎朝コーヒーを飲みます。
日本語のテキストを分割します。機械学習と自然言語処理の研究をしています。
北京是中国的首都。我们今天去公园散步。这个模型可以理解中文和英文。
서울은 한국의 수도입니다. 오늘 날씨가 좋네요.
Привет, как дела? Это пример текста на русском языке.
	indented with a tab
		and two tabs
Ça va très bien, merci. Le café est délicieux. Über den Wolken muss die Freiheit wohl grenzenlos sein.
"""

# The chat tokens and templates of each family (Gemma 3's chat template, shortened, as arch_gemma3.py
# has it; Phi-3.5-mini-instruct's).
GEMMA_CONTROL = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "[@BOS@]", "<unused0>", "<unused1>", "<start_of_turn>", "<end_of_turn>"]
# Gemma's card adds runs of spaces and some markup as non-special tokens: USER_DEFINED, ▁ as spaces.
GEMMA_USER_DEFINED = ["  ", "   ", "    ", "<table>", "</table>", "<tr>", "<td>"]
PHI3_CONTROL = ["<|endoftext|>", "<|assistant|>", "<|placeholder1|>", "<|placeholder2|>", "<|placeholder3|>", "<|placeholder4|>", "<|system|>", "<|end|>", "<|placeholder5|>", "<|placeholder6|>", "<|user|>"]
PHI3_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)
UNREACHABLE_CHARACTER_PIECES = ["Ωm", "▁Ω", "∑∫"]
# Llama 2's hand-added whitespace pieces (▁▁ .. ▁×8 here), all scored -1e9.
SPACE_RUN_SCORE = -1e9


def words(text, newline_pieces):
    """SentencePiece's pre-split: ▁ starts a word, runs of ▁ before a word keep one ▁ for it."""
    escaped = text.replace(" ", SPACE)
    found = re.findall(f"{SPACE}?[^{SPACE}\\n\\t]+|{SPACE}+(?={SPACE})|{SPACE}+|\\n+|\\t+", escaped)
    return [w for w in found if newline_pieces or ("\n" not in w and "\t" not in w)]


def learn_merges(counts, merges):
    """Byte-pair merges over the words' characters: the most frequent pair first (ties: first seen)."""
    spelled = {word: list(word) for word in counts}
    pair_count = Counter()
    where = defaultdict(set)
    for word, count in counts.items():
        symbols = spelled[word]
        for a, b in zip(symbols, symbols[1:]):
            pair_count[a, b] += count
            where[a, b].add(word)
    learned = []
    while len(learned) < merges and pair_count:
        (a, b), best = max(pair_count.items(), key=lambda item: (item[1], -len(item[0][0] + item[0][1])))
        if best <= 0:
            break
        learned.append(a + b)
        for word in list(where.pop((a, b), ())):
            count = counts[word]
            symbols = spelled[word]
            for x, y in zip(symbols, symbols[1:]):
                pair_count[x, y] -= count
            merged, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            spelled[word] = merged
            for x, y in zip(merged, merged[1:]):
                pair_count[x, y] += count
                where[x, y].add(word)
        pair_count = Counter({pair: c for pair, c in pair_count.items() if c > 0})
    return learned


def frequent_substrings(counts, known, wanted):
    """Substrings (2 to 6 characters) of the words, most frequent first, that are not pieces yet."""
    found = Counter()
    for word, count in counts.items():
        for length in range(2, 7):
            for start in range(len(word) - length + 1):
                found[word[start:start + length]] += count
    ranked = sorted((p for p in found if p not in known and not set(p) <= {SPACE}), key=lambda p: (-found[p], p))
    return ranked[:max(0, wanted)]


def pieces(newline_pieces, target):
    """The learned pieces (merge order), then frequent substrings the merges did not make (pieces no
    merge reaches, and overlapping alternatives), `target` in all, then every character of the
    sample: (text, score) pairs, scores falling with rank."""
    counts = Counter(words(SAMPLE, newline_pieces))
    learned = [p for p in learn_merges(counts, target) if not set(p) <= {SPACE}]
    learned += frequent_substrings(counts, set(learned), target - len(learned))
    characters = sorted({c for w in counts for c in w})
    scored = [(p, -float(rank + 1)) for rank, p in enumerate(learned)]
    # Pieces one of whose characters is no piece (a vocabulary whose rare characters fall back to
    # bytes can hold such): llama.cpp still joins Ω and m, since it merges any two symbols whose
    # text is a piece.
    scored += [(p, -float(len(scored) + i + 1)) for i, p in enumerate(UNREACHABLE_CHARACTER_PIECES)]
    scored += [(SPACE * n, SPACE_RUN_SCORE) for n in range(2, 9)]
    scored += [(c, -float(len(learned) + i + 1)) for i, c in enumerate(characters)]
    return scored


class SentencePieceVocab:
    def __init__(self, tokens, scores, types, bos, eos, unk, pad, add_bos, add_space_prefix, chat_template):
        self.tokens, self.scores, self.types = tokens, scores, types
        self.bos, self.eos, self.unk, self.pad = bos, eos, unk, pad
        self.add_bos, self.add_space_prefix, self.chat_template = add_bos, add_space_prefix, chat_template

    def write(self, writer):
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(self.tokens)
        writer.add_token_scores(self.scores)
        writer.add_token_types(self.types)
        writer.add_bos_token_id(self.bos)
        writer.add_eos_token_id(self.eos)
        writer.add_unk_token_id(self.unk)
        if self.pad is not None:
            writer.add_pad_token_id(self.pad)
        writer.add_add_bos_token(self.add_bos)
        writer.add_add_eos_token(False)
        if self.add_space_prefix is not None:
            writer.add_add_space_prefix(self.add_space_prefix)
        writer.add_chat_template(self.chat_template)


def byte_pieces():
    return [f"<0x{b:02X}>" for b in range(256)]


def gemma_vocab(size, target, chat_template):
    tokens = list(GEMMA_CONTROL)
    types = [CONTROL] * len(tokens)
    types[GEMMA_CONTROL.index("<unk>")] = UNKNOWN
    scores = [0.0] * len(tokens)
    tokens += GEMMA_USER_DEFINED
    types += [USER_DEFINED] * len(GEMMA_USER_DEFINED)
    scores += [-1000.0] * len(GEMMA_USER_DEFINED)
    tokens += byte_pieces()
    types += [BYTE] * 256
    scores += [0.0] * 256
    for text, score in pieces(True, target):
        tokens.append(text)
        types.append(NORMAL)
        scores.append(score)
    pad_to(tokens, scores, types, size, UNUSED)
    return SentencePieceVocab(tokens, scores, types, bos=2, eos=1, unk=3, pad=0, add_bos=True, add_space_prefix=False, chat_template=chat_template)


def phi3_vocab(size, target):
    tokens = ["<unk>", "<s>", "</s>"] + byte_pieces()
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256
    scores = [0.0] * len(tokens)
    for text, score in pieces(False, target):
        tokens.append(text)
        types.append(NORMAL)
        scores.append(score)
    first_chat = len(tokens)
    tokens += PHI3_CONTROL
    types += [CONTROL] * len(PHI3_CONTROL)
    scores += [-1000.0] * len(PHI3_CONTROL)
    pad_to(tokens, scores, types, size, UNUSED)
    return SentencePieceVocab(tokens, scores, types, bos=1, eos=first_chat, unk=0, pad=first_chat, add_bos=False, add_space_prefix=None, chat_template=PHI3_CHAT_TEMPLATE)


def pad_to(tokens, scores, types, size, pad_type):
    if size and size < len(tokens):
        raise SystemExit(f"--vocab {size} is below the {len(tokens)} tokens the SentencePiece vocabulary needs")
    for i in range(len(tokens), size):
        tokens.append(f"[PAD{i}]")
        scores.append(-10000.0)
        types.append(pad_type)


def spm_vocabulary(family, size=0, pieces_wanted=3000, chat_template=None):
    if family == "gemma":
        return gemma_vocab(size, pieces_wanted, chat_template)
    if family == "phi3":
        return phi3_vocab(size, pieces_wanted)
    raise SystemExit(f"no SentencePiece vocabulary for the {family} family (known: gemma, phi3)")
