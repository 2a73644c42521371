/**
 * Our GGUF tokenizer (src/model/gguf/ggufTokenizer.ts) against llama.cpp's on the same file:
 * writes vocabulary-only GGUF files (a gpt2 vocabulary under each pre-tokenizer we map, and a
 * llama SentencePiece one), tokenizes a set of texts with llama.cpp (node-llama-cpp's
 * model.tokenize(text, true), special tokens parsed, no BOS) and with ours (encode), and
 * prints how many texts agree per file, with the first differences, and whether both add BOS
 * to a prompt (llama.cpp's shouldPrependBosToken, our completionsAddBos).
 *
 *   mkdir -p /tmp/lcpp2 && cd /tmp/lcpp2 && npm init -y && npm i node-llama-cpp@3.22.1
 *   npx bun scripts/compare-gguf-tokenizer.ts [--lcpp /tmp/lcpp2] [--bpe-folder DIR] [--out DIR]
 *
 * --bpe-folder: a byte-level BPE tokenizer folder (tokenizer.json with merges) to take the
 * vocabulary from (default: models/quality's, bytes only); the SentencePiece vocabulary is
 * made from the same merges (each token's text, spaces as ▁, scored by merge order).
 * node-llama-cpp is never a dependency of ctxr: it is loaded from the --lcpp folder by node.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { byteToUnicode } from "../src/model/byteTokenizer.ts";
import { ggufArray, ggufBool, ggufFloat32, ggufString, ggufUint32, type GgufMetadata } from "../src/model/gguf/ggufMetadata.ts";
import { ggufModelTokenizer } from "../src/model/gguf/ggufTokenizer.ts";
import { encodeGguf } from "../src/model/gguf/ggufWriter.ts";

const { values } = parseArgs({
  options: { lcpp: { type: "string", default: "/tmp/lcpp2" }, "bpe-folder": { type: "string" }, out: { type: "string", default: "/tmp/ctxr-gguf-tokenizer-compare" } },
});
const root = resolve(import.meta.dir, "..");
const bpeFolder = resolve(values["bpe-folder"] ?? join(root, "models/quality"));
const out = resolve(values.out!);
mkdirSync(out, { recursive: true });

const README = readFileSync(join(root, "README.md"), "utf8");
const TEXTS = [
  "Hello, world!",
  "the truth is {\"a\": 10, \"b\": 12, \"c\": true}",
  "  leading spaces and trailing   ",
  "lines\nand\r\nmore\n\n\nlines\t\ttabs",
  "héllo wörld café é é",
  "日本語のテキスト 한국어 中文",
  "emoji 🎉👩‍👩‍👧 and ½∑ €100",
  "<s>a special token</s> in text <s>",
  "don't you'll I'm we've THEY'RE It's",
  "1234567890 3.14159 1,000,000 $5 +7 <=> ^~|",
  "x",
  " ",
  "\n",
  "  \n  x",
  "the the the thethethe  the\n the",
  "   multiple   spaces\u00a0nbsp\u2009thin",
  "ÀÉÎÕÜ ñ ß ø Ω ж",
  ...README.split(/\n(?=#)/).slice(0, 40),
];

/** Hyperparameters llama.cpp needs to open a llama file (vocabulary only: no tensors are read). */
function llamaHparams(metadata: GgufMetadata, vocab: number): void {
  metadata.set("general.architecture", ggufString("llama"));
  metadata.set("general.name", ggufString("tokenizer-compare"));
  metadata.set("llama.vocab_size", ggufUint32(vocab));
  metadata.set("llama.context_length", ggufUint32(2048));
  metadata.set("llama.embedding_length", ggufUint32(64));
  metadata.set("llama.block_count", ggufUint32(1));
  metadata.set("llama.feed_forward_length", ggufUint32(128));
  metadata.set("llama.attention.head_count", ggufUint32(2));
  metadata.set("llama.attention.head_count_kv", ggufUint32(2));
  metadata.set("llama.rope.dimension_count", ggufUint32(32));
  metadata.set("llama.attention.layer_norm_rms_epsilon", ggufFloat32(1e-5));
}

interface Source {
  tokens: string[];
  merges: string[];
  bos: number;
  eos: number;
  specials: Set<number>;
}

function readBpeFolder(dir: string): Source {
  const json = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  const tokens: string[] = [];
  for (const [token, id] of Object.entries(json.model.vocab as Record<string, number>)) tokens[id] = token;
  const specials = new Set<number>();
  for (const added of json.added_tokens as { id: number; content: string; special: boolean }[]) {
    tokens[added.id] = added.content;
    if (added.special) specials.add(added.id);
  }
  const merges = (json.model.merges as (string | string[])[]).map((merge) => (Array.isArray(merge) ? merge.join(" ") : merge));
  return { tokens, merges, bos: tokens.indexOf("<s>"), eos: tokens.indexOf("</s>"), specials };
}

function gpt2File(source: Source, pre: string): GgufMetadata {
  const metadata: GgufMetadata = new Map();
  llamaHparams(metadata, source.tokens.length);
  metadata.set("tokenizer.ggml.model", ggufString("gpt2"));
  metadata.set("tokenizer.ggml.pre", ggufString(pre));
  metadata.set("tokenizer.ggml.tokens", ggufArray("string", source.tokens));
  metadata.set("tokenizer.ggml.token_type", ggufArray("int32", source.tokens.map((_, id) => (source.specials.has(id) ? 3 : 1))));
  metadata.set("tokenizer.ggml.merges", ggufArray("string", source.merges));
  metadata.set("tokenizer.ggml.bos_token_id", ggufUint32(source.bos));
  metadata.set("tokenizer.ggml.eos_token_id", ggufUint32(source.eos));
  metadata.set("tokenizer.ggml.add_bos_token", ggufBool(true));
  return metadata;
}

/** A SentencePiece vocabulary from byte-level BPE merges: each merged token's text (valid UTF-8 only), spaces as ▁, scored by merge order. */
function spmFile(source: Source): GgufMetadata {
  const unicodeToByte = new Map(byteToUnicode().map((character, byte) => [character, byte]));
  const utf8 = new TextDecoder("utf-8", { fatal: true });
  const textOf = (token: string): string | null => {
    const bytes: number[] = [];
    for (const character of token) {
      const byte = unicodeToByte.get(character);
      if (byte === undefined) return null;
      bytes.push(byte);
    }
    try {
      return utf8.decode(new Uint8Array(bytes)).replaceAll(" ", "\u2581");
    } catch {
      return null;
    }
  };
  const tokens = ["<unk>", "<s>", "</s>"];
  const types = [2, 3, 3];
  const scores = [0, 0, 0];
  for (let byte = 0; byte < 256; byte++) {
    tokens.push(`<0x${byte.toString(16).toUpperCase().padStart(2, "0")}>`);
    types.push(6);
    scores.push(0);
  }
  const seen = new Set(tokens);
  const add = (text: string, score: number) => {
    if (seen.has(text) || text === "") return;
    seen.add(text);
    tokens.push(text);
    types.push(1);
    scores.push(score);
  };
  // Single characters first (lowest scores), then merged pieces by merge order.
  for (let id = 0; id < 256; id++) {
    const text = textOf(source.tokens[id]!);
    if (text !== null) add(text, -1e6 - id);
  }
  source.merges.forEach((merge, index) => {
    const text = textOf(merge.replace(" ", ""));
    if (text !== null) add(text, -index);
  });
  const metadata: GgufMetadata = new Map();
  llamaHparams(metadata, tokens.length);
  metadata.set("tokenizer.ggml.model", ggufString("llama"));
  metadata.set("tokenizer.ggml.tokens", ggufArray("string", tokens));
  metadata.set("tokenizer.ggml.scores", ggufArray("float32", scores));
  metadata.set("tokenizer.ggml.token_type", ggufArray("int32", types));
  metadata.set("tokenizer.ggml.bos_token_id", ggufUint32(1));
  metadata.set("tokenizer.ggml.eos_token_id", ggufUint32(2));
  metadata.set("tokenizer.ggml.unknown_token_id", ggufUint32(0));
  return metadata;
}

const source = readBpeFolder(bpeFolder);
const files: [string, GgufMetadata][] = [
  ...["gpt-2", "default", "llama-bpe", "qwen2"].map((pre): [string, GgufMetadata] => [`gpt2-${pre}`, gpt2File(source, pre)]),
  ["llama-spm", spmFile(source)],
];
// Without tokenizer.ggml.add_bos_token each side falls back to its default for the vocabulary.
for (const name of ["gpt2-gpt-2", "gpt2-llama-bpe", "llama-spm"]) {
  const metadata = new Map(files.find(([file]) => file === name)![1]);
  metadata.delete("tokenizer.ggml.add_bos_token");
  files.push([`${name}-default-bos`, metadata]);
}
for (const [name, metadata] of files) writeFileSync(join(out, `${name}.gguf`), encodeGguf(metadata, [])); // metadata only: llama.cpp opens it vocabulary-only
writeFileSync(join(out, "texts.json"), JSON.stringify(TEXTS));

// llama.cpp's ids, from node (node-llama-cpp's prebuilt binary).
const program = `
import { getLlama } from "node-llama-cpp";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
const dir = process.argv[2];
const texts = JSON.parse(readFileSync(dir + "/texts.json", "utf8"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const result = {};
for (const file of readdirSync(dir).filter((f) => f.endsWith(".gguf"))) {
  const model = await llama.loadModel({ modelPath: dir + "/" + file, vocabOnly: true });
  result[file] = { ids: texts.map((text) => Array.from(model.tokenize(text, true))), addBos: model.tokens.shouldPrependBosToken };
  await model.dispose();
}
writeFileSync(dir + "/llamacpp.json", JSON.stringify(result));
`;
writeFileSync(join(values.lcpp!, "tokenize-gguf.mjs"), program);
const run = spawnSync("node", [join(values.lcpp!, "tokenize-gguf.mjs"), out], { cwd: values.lcpp, encoding: "utf8" });
if (run.status !== 0) {
  console.error(run.stdout, run.stderr);
  process.exit(1);
}
const theirs = JSON.parse(readFileSync(join(out, "llamacpp.json"), "utf8")) as Record<string, { ids: number[][]; addBos: boolean }>;

let failures = 0;
for (const file of readdirSync(out).filter((name) => name.endsWith(".gguf")).sort()) {
  const metadata = files.find(([name]) => `${name}.gguf` === file)![1];
  const { tokenizer, addBos } = ggufModelTokenizer(metadata, file);
  const differences: string[] = [];
  TEXTS.forEach((text, index) => {
    const ours = tokenizer.encode(text);
    const expected = theirs[file]!.ids[index]!;
    if (JSON.stringify(ours) !== JSON.stringify(expected)) {
      differences.push(`  text ${index} ${JSON.stringify(text.slice(0, 60))}\n    ours     ${JSON.stringify(ours.slice(0, 40))}\n    llama.cpp ${JSON.stringify(expected.slice(0, 40))}`);
    }
  });
  const tokensCompared = theirs[file]!.ids.reduce((total, ids) => total + ids.length, 0);
  console.log(`${file}: ${TEXTS.length - differences.length}/${TEXTS.length} texts identical (${tokensCompared} llama.cpp tokens); adds BOS: ours ${addBos}, llama.cpp ${theirs[file]!.addBos}`);
  if (addBos !== theirs[file]!.addBos) failures++;
  for (const line of differences.slice(0, 5)) console.log(line);
  failures += differences.length;
}
process.exit(failures === 0 ? 0 : 1);
