/**
 * The fake engine of scripts/bench-proxy.ts, run as its own process
 * (`bun scripts/benchProxyUpstream.ts [--chunk-delay-ms D] [--block-words W]`
 * prints `url http://127.0.0.1:PORT`), and the synthetic documents.
 *
 * A document is ~1,000 tokens (about 4,000 characters, ~650 words) of words
 * drawn by a generator seeded with its id, between "Document N begins." and
 * "Document N ends.". The engine's answer is a deterministic function of the
 * documents its prompt holds in full: "Read documents: 3, 17, 25." — so a
 * rewritten prompt gives the same answer exactly when every document the
 * client sent is still there in full (once, anywhere in the conversation).
 */
import { startFakeUpstream } from "../test/proxy/fakeUpstream.ts";

const VOCABULARY = (
  "the of and to in is was for on that with as by at from it an be this which or are were has have had not but " +
  "river city market policy energy protein system model network signal court law trade music history climate ocean " +
  "theory data engine cache memory result method paper study sample value growth region species orbit planet season " +
  "council bridge harbor castle treaty empire poem novel chapter author reader library museum garden forest mountain " +
  "valley desert island coast village farmer merchant soldier doctor teacher student engineer pilot sailor painter"
).split(" ");

/** ~1,000 tokens of text for a document id (deterministic). */
export function documentText(id: number | string, targetChars = 4000): string {
  let state = typeof id === "number" ? id + 1 : [...id].reduce((h, c) => (h * 31 + c.charCodeAt(0)) >>> 0, 7);
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const words: string[] = [`Document ${id} begins.`];
  let length = words[0]!.length;
  const end = `Document ${id} ends.`;
  while (length < targetChars - end.length) {
    const word = VOCABULARY[Math.floor(next() * VOCABULARY.length)]!;
    words.push(word);
    length += word.length + 1;
  }
  words.push(end);
  return words.join(" ");
}

/** The answer: the ids of the documents present in full in the prompt, sorted. */
export function answerFor(prompt: string): string {
  const ids = new Set<string>();
  for (const match of prompt.matchAll(/Document (\S+) begins\./g)) {
    const id = match[1]!;
    if (!ids.has(id) && prompt.includes(documentText(/^\d+$/.test(id) ? Number(id) : id))) ids.add(id);
  }
  const sorted = [...ids].sort((a, b) => Number(a) - Number(b) || a.localeCompare(b));
  return `Read documents: ${sorted.join(", ")}.`;
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const flag = (name: string, fallback: number) => {
    const at = args.indexOf(name);
    return at >= 0 ? Number(args[at + 1]) : fallback;
  };
  const upstream = await startFakeUpstream({ chunkDelayMs: flag("--chunk-delay-ms", 1), blockWords: flag("--block-words", 16), answer: (prompt) => answerFor(prompt) });
  process.stdout.write(`url ${upstream.url}\n`);
  process.on("SIGTERM", () => void upstream.stop().then(() => process.exit(0)));
}
