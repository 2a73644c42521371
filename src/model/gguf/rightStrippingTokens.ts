/**
 * Token attributes llama.cpp sets by the model's name, since GGUF files do not store them
 * (llama-vocab.cpp, "set attributes by model/tokenizer/architecture name"). For a `general.name`
 * containing "phi3" or "phi-3" (ASCII case ignored), every special token it matches in text
 * (control, user-defined and unknown types) and "</s>" right-strip: the whitespace after them in
 * a text is dropped before tokenizing, except after "<unk>", "<s>" and "<|endoftext|>". Microsoft's
 * own Phi-3 GGUF files are named "Phi3", so there "<|user|>\nHi" is <|user|> ▁Hi, not
 * <|user|> ▁ <0x0A> Hi. (Files named "Phi 3.5 Mini Instruct", as llama.cpp's converter names them
 * now, keep the newline.)
 *
 * Pure: token texts and types in, a text rewrite out.
 */
import { TOKEN_TYPE } from "./ggufTokenTypes.ts";

const PHI3_NAMES = ["phi3", "phi-3"];
const ALWAYS_RIGHT_STRIPPING = ["</s>"];
const NEVER_RIGHT_STRIPPING = new Set(["<unk>", "<s>", "<|endoftext|>"]);
/** C's isspace in the "C" locale, which llama.cpp strips with: ASCII whitespace only. */
const C_WHITESPACE = "[ \\t\\n\\v\\f\\r]+";

/** llama.cpp lowercases the name byte by byte (std::tolower): ASCII letters only. */
function asciiLowercase(text: string): string {
  return text.replace(/[A-Z]/g, (letter) => letter.toLowerCase());
}

/** The texts of the tokens that right-strip in a file of this name (none for most names). */
export function rightStrippingTokens(name: string | undefined, tokens: readonly string[], types: readonly number[]): string[] {
  const lowered = asciiLowercase(name ?? "");
  if (!PHI3_NAMES.some((phi3) => lowered.includes(phi3))) return [];
  const stripping = new Set<string>();
  tokens.forEach((text, id) => {
    const type = types[id];
    if (type === TOKEN_TYPE.control || type === TOKEN_TYPE.userDefined || type === TOKEN_TYPE.unknown) stripping.add(text);
  });
  for (const text of ALWAYS_RIGHT_STRIPPING) if (tokens.includes(text)) stripping.add(text);
  for (const text of NEVER_RIGHT_STRIPPING) stripping.delete(text);
  return [...stripping].filter((text) => text.length > 0);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/**
 * The text with the whitespace after each right-stripping token removed, or null when there are
 * none. Longer tokens are tried first at a position, as llama.cpp partitions the longest first.
 */
export function stripWhitespaceAfter(tokenTexts: readonly string[]): ((text: string) => string) | null {
  if (tokenTexts.length === 0) return null;
  const alternatives = [...tokenTexts].sort((a, b) => b.length - a.length).map(escapeRegExp);
  const pattern = new RegExp(`(${alternatives.join("|")})${C_WHITESPACE}`, "g");
  return (text) => text.replace(pattern, "$1");
}
