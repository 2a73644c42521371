/**
 * The regex that splits a text into pieces for the byte-level BPE tokenizers PieceMemoEncoder
 * reproduces, read from tokenizer.json:
 *
 * - GPT-2's: `pre_tokenizer: {type: "ByteLevel", use_regex: true}` (the regex is built in);
 * - Llama 3's and Qwen2's: `pre_tokenizer: {type: "Sequence", pretokenizers: [{type: "Split",
 *   pattern: {Regex}, behavior: "Isolated", invert: false}, {type: "ByteLevel", use_regex: false,
 *   add_prefix_space: false}]}`, the pattern (Oniguruma syntax) compiled from the file as a JS
 *   regex with the `u` flag (knownSplitPatterns.ts: only patterns whose splitting is proven to
 *   allow per-piece and per-span memos);
 *
 * with no normalizer or NFC (applied by the encoder). Anything else is null: the library then
 * encodes whole prompts.
 */
import { SPAN_SAFE_SPLIT_PATTERNS } from "./knownSplitPatterns.ts";

/** The ByteLevel pre-tokenizer's regex (GPT-2's), as @huggingface/tokenizers writes it. */
export const GPT2_PIECES = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

export interface PieceSplitting {
  /** Global (`g`) and unicode (`u`). */
  regex: RegExp;
  /** Whether the text is NFC-normalized first (Qwen2's normalizer). */
  nfc: boolean;
}

/** The tokenizer.json's piece splitting when it is of the family; null otherwise. */
export function pieceSplitting(config: any): PieceSplitting | null {
  const normalizer = config?.normalizer;
  if (normalizer !== null && !(normalizer?.type === "NFC" && Object.keys(normalizer).length === 1)) return null;
  const nfc = normalizer !== null;
  const pre = config?.pre_tokenizer;
  if (pre?.type === "ByteLevel") {
    return pre.use_regex !== false && pre.add_prefix_space !== true ? { regex: GPT2_PIECES, nfc } : null;
  }
  if (pre?.type !== "Sequence" || !Array.isArray(pre.pretokenizers) || pre.pretokenizers.length !== 2) return null;
  const [split, byteLevel] = pre.pretokenizers;
  const splitOk = split?.type === "Split" && split.behavior === "Isolated" && split.invert === false && typeof split.pattern?.Regex === "string" && Object.keys(split.pattern).length === 1;
  const byteLevelOk = byteLevel?.type === "ByteLevel" && byteLevel.use_regex === false && byteLevel.add_prefix_space === false;
  if (!splitOk || !byteLevelOk || !SPAN_SAFE_SPLIT_PATTERNS.includes(split.pattern.Regex)) return null;
  const source = onigurumaToJs(split.pattern.Regex);
  if (source === null) return null;
  try {
    return { regex: new RegExp(source, "gu"), nfc };
  } catch {
    return null;
  }
}

const PROPERTIES = new Set(["L", "N", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mn", "Mc", "Me", "Nd", "Nl", "No", "P", "S", "Z", "Zs", "Zl", "Zp", "C", "Cc"]);
const CONTROL_ESCAPES = new Set(["r", "n", "t", "f", "v"]);
/** Characters JS's `u` mode lets (and makes) a pattern escape. */
const JS_SYNTAX = "^$\\.*+?()[]{}|/";

/**
 * A JS (`u` flag) source matching exactly what @huggingface/tokenizers matches for an Oniguruma
 * pattern (it rewrites `\s` as White_Space, and `(?i:...)` folds ASCII letters only), for a small
 * subset of the syntax: literals, `\s \S \r \n \t \f \v \p{..} \P{..}` and escaped punctuation,
 * flat character classes, groups `(?: (?i: (?= (?!`, alternation and single quantifiers. Null for
 * anything else (no `.`, anchors, `\w`, `\d`, `\b`, nested classes, possessive or lazy quantifiers).
 */
export function onigurumaToJs(pattern: string): string | null {
  let out = "";
  /** Per open group: whether it folds ASCII case. */
  const groups: boolean[] = [];
  let fold = false;
  let afterAtom = false;
  const chars = [...pattern];
  for (let i = 0; i < chars.length; ) {
    const char = chars[i]!;
    if (char === "\\") {
      const escaped = escapeAt(chars, i, false);
      if (escaped === null) return null;
      out += escaped.text;
      i = escaped.end;
      afterAtom = true;
    } else if (char === "[") {
      if (fold) return null;
      const parsed = classAt(chars, i);
      if (parsed === null) return null;
      out += parsed.text;
      i = parsed.end;
      afterAtom = true;
    } else if (char === "(") {
      const head = chars.slice(i, i + 3).join("");
      const prefix = head === "(?i" && chars[i + 3] === ":" ? "(?i:" : head === "(?:" || head === "(?=" || head === "(?!" ? head : chars[i + 1] === "?" ? null : "(";
      if (prefix === null) return null;
      groups.push(fold);
      if (prefix === "(?i:") fold = true;
      out += prefix === "(?i:" ? "(?:" : prefix;
      i += prefix.length;
      afterAtom = false;
    } else if (char === ")") {
      if (groups.length === 0) return null;
      fold = groups.pop()!;
      out += ")";
      i++;
      afterAtom = true;
    } else if (char === "|") {
      out += "|";
      i++;
      afterAtom = false;
    } else if (char === "?" || char === "*" || char === "+" || char === "{") {
      if (!afterAtom) return null;
      let end = i + 1;
      if (char === "{") {
        const brace = /^\{(\d+)(,\d*)?\}/.exec(chars.slice(i, i + 16).join(""));
        if (brace === null) return null;
        end = i + [...brace[0]].length;
      }
      // No quantifier on a quantifier: Oniguruma reads `x{1,3}+` and `x++` in ways JS does not.
      if (end < chars.length && "?*+{".includes(chars[end]!)) return null;
      out += chars.slice(i, end).join("");
      i = end;
      afterAtom = false;
    } else if (".^$]}/".includes(char)) {
      return null;
    } else {
      out += fold && /^[A-Za-z]$/.test(char) ? `[${char.toLowerCase()}${char.toUpperCase()}]` : char;
      i++;
      afterAtom = true;
    }
  }
  return groups.length === 0 ? out : null;
}

function escapeAt(chars: string[], i: number, inClass: boolean): { text: string; end: number } | null {
  const next = chars[i + 1];
  if (next === undefined) return null;
  if (next === "s") return { text: "\\p{White_Space}", end: i + 2 };
  if (next === "S") return { text: "\\P{White_Space}", end: i + 2 };
  if (CONTROL_ESCAPES.has(next)) return { text: `\\${next}`, end: i + 2 };
  if (next === "p" || next === "P") {
    const close = chars.indexOf("}", i);
    const name = chars.slice(i + 3, close).join("");
    if (chars[i + 2] !== "{" || close < 0 || !PROPERTIES.has(name)) return null;
    return { text: `\\${next}{${name}}`, end: close + 1 };
  }
  if (/^[\p{L}\p{N}_\s]$/u.test(next)) return null;
  // Escaped punctuation is the character itself.
  return { text: JS_SYNTAX.includes(next) || (inClass && next === "-") ? `\\${next}` : next, end: i + 2 };
}

function classAt(chars: string[], i: number): { text: string; end: number } | null {
  let text = "[";
  let j = i + 1;
  if (chars[j] === "^") {
    text += "^";
    j++;
  }
  let first = true;
  /** Whether the last item was a plain character (a range may start there). */
  let plain = false;
  for (; j < chars.length; ) {
    const char = chars[j]!;
    if (char === "]" && !first) return { text: `${text}]`, end: j + 1 };
    if (char === "[" || char === "]" || (char === "&" && chars[j + 1] === "&")) return null;
    if (char === "\\") {
      const escaped = escapeAt(chars, j, true);
      if (escaped === null) return null;
      text += escaped.text;
      j = escaped.end;
      plain = false;
    } else if (char === "-") {
      // A literal '-' first or last, or a range between two plain characters.
      const next = chars[j + 1];
      const literal = first || next === "]";
      if (!literal && (!plain || next === undefined || "\\[]-".includes(next))) return null;
      text += literal ? "\\-" : "-";
      j++;
      plain = false;
    } else {
      text += JS_SYNTAX.includes(char) ? `\\${char}` : char;
      j++;
      plain = true;
    }
    first = false;
  }
  return null;
}
