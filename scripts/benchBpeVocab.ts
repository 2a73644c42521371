/**
 * A byte-level BPE vocabulary for benchmarks that need one a real model would have (grammar
 * masks: xgrammar's work and the UTF-8 filter grow with the tokens' number and shapes, and the
 * byte tokenizer has 256): the byte tokenizer (bytes 0-255 as GPT-2's characters, <s>, </s>,
 * <pad>) plus merges up to the model's vocab_size. The merged tokens are the most frequent
 * substrings (2-8 bytes) of GPT-2-style pre-tokens of a corpus — the repository's Markdown and
 * TypeScript — each merged from its prefix and its last byte (a prefix is at least as frequent,
 * so it is there first). The model folder shares the weights of the byte-vocabulary one.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BYTE_TOKENIZER_VOCAB, byteToUnicode, byteTokenizerJson } from "../src/model/byteTokenizer.ts";
import { REPO, benchModelFolder, progress } from "./benchKit.ts";

const PRE_TOKEN = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
const LONGEST = 8;

function corpusFiles(dir: string, out: string[] = []): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) corpusFiles(path, out);
    else if (entry.name.endsWith(".ts") || entry.name.endsWith(".md")) out.push(path);
  }
  return out;
}

/** The tokenizer.json of a byte-level BPE vocabulary of `vocab` tokens learnt from `text`. */
export function bpeTokenizerJson(vocab: number, text: string): Record<string, unknown> {
  const counts = new Map<string, number>();
  const encoder = new TextEncoder();
  for (const piece of text.match(PRE_TOKEN) ?? []) {
    const bytes = encoder.encode(piece);
    for (let start = 0; start < bytes.length; start++) {
      let key = String.fromCharCode(bytes[start]!);
      for (let end = start + 1; end < Math.min(bytes.length, start + LONGEST); end++) {
        key += String.fromCharCode(bytes[end]!);
        counts.set(key, (counts.get(key) ?? 0) + 1);
      }
    }
  }
  // Most frequent first, shorter first among equals: a key's prefix (as frequent at least) comes before it.
  const ranked = [...counts].sort((a, b) => b[1] - a[1] || a[0].length - b[0].length || (a[0] < b[0] ? -1 : 1));
  const chars = byteToUnicode();
  const mapped = (key: string) => [...key].map((c) => chars[c.charCodeAt(0)]).join("");
  const json = byteTokenizerJson() as { model: { vocab: Record<string, number>; merges: string[] } };
  let id = BYTE_TOKENIZER_VOCAB;
  for (const [key] of ranked) {
    if (id >= vocab) break;
    json.model.vocab[mapped(key)] = id++;
    json.model.merges.push(`${mapped(key.slice(0, -1))} ${mapped(key.slice(-1))}`);
  }
  return json;
}

/** The bench model `name` with a BPE vocabulary filling its vocab_size, written when missing; returns its folder. */
export function bpeModelFolder(name: string): string {
  const base = benchModelFolder(name);
  const path = `${base}-bpe`;
  if (existsSync(join(path, "tokenizer.json"))) return path;
  progress(`writing a BPE vocabulary for the ${name} model to ${path} ...`);
  const vocab = (JSON.parse(readFileSync(join(base, "config.json"), "utf8")) as { vocab_size: number }).vocab_size;
  const text = corpusFiles(join(REPO, "src")).concat(join(REPO, "README.md")).map((file) => readFileSync(file, "utf8")).join("\n");
  mkdirSync(path, { recursive: true });
  for (const file of ["model.safetensors", "config.json"]) if (!existsSync(join(path, file))) symlinkSync(join(base, file), join(path, file));
  writeFileSync(join(path, "tokenizer_config.json"), readFileSync(join(base, "tokenizer_config.json")));
  writeFileSync(join(path, "tokenizer.json"), JSON.stringify(bpeTokenizerJson(vocab, text)));
  return path;
}
