/**
 * A deterministic EBNF expression for a regular language given as a union of sequences of
 * repeated character sets: the sequences are compiled to a minimal DFA, written back as nested
 * choices whose branches start with disjoint characters (self-loops as `C*`).
 *
 * Why: xgrammar 0.1.27 merges states of a rule's automaton wrongly when a choice's alternatives
 * share a prefix (mlc-ai/xgrammar#618, fixed upstream in #632 after the last web-xgrammar
 * release): `"10" | "-10" | "-100"` accepts 1000, `"ab" | "-ab" | "-abc"` accepts abc. Written
 * deterministically, no two branches of a choice start alike, and the merge is never wrong.
 * Pure.
 */

/** `chars` (code points) repeated min..max times (max Infinity: unbounded). */
export interface Atom {
  chars: readonly number[];
  min: number;
  max: number;
}

export const atom = (chars: string, min = 1, max = min): Atom => ({ chars: [...chars].map((c) => c.codePointAt(0)!), min, max });
export const literal = (text: string): Atom[] => [...text].map((c) => atom(c));
export const digitRange = (low: number, high: number, min = 1, max = min): Atom => ({ chars: Array.from({ length: high - low + 1 }, (_, i) => 0x30 + low + i), min, max });

/** Thompson NFA: ε-edges and character edges. */
class Nfa {
  readonly epsilon: number[][] = [];
  readonly edges: Map<number, number[]>[] = [];
  readonly accepting = new Set<number>();

  state(): number {
    this.epsilon.push([]);
    this.edges.push(new Map());
    return this.epsilon.length - 1;
  }

  /** Edges for `chars` from `from`, to a new state. */
  step(from: number, chars: readonly number[], to = this.state()): number {
    const edges = this.edges[from]!;
    for (const c of chars) edges.set(c, [...(edges.get(c) ?? []), to]);
    return to;
  }

  closure(states: Iterable<number>): Set<number> {
    const out = new Set(states);
    const stack = [...out];
    while (stack.length > 0) for (const next of this.epsilon[stack.pop()!]!) if (!out.has(next)) stack.push((out.add(next), next));
    return out;
  }
}

function buildNfa(sequences: readonly (readonly Atom[])[]): { nfa: Nfa; start: number } {
  const nfa = new Nfa();
  const start = nfa.state();
  for (const sequence of sequences) {
    let at = start;
    for (const { chars, min, max } of sequence) {
      for (let i = 0; i < min; i++) at = nfa.step(at, chars);
      if (max === Infinity) {
        const loop = nfa.state();
        nfa.epsilon[at]!.push(loop);
        nfa.step(loop, chars, loop);
        at = loop;
      } else {
        const end = nfa.state();
        for (let i = min; i < max; i++) {
          nfa.epsilon[at]!.push(end);
          at = nfa.step(at, chars);
        }
        nfa.epsilon[at]!.push(end);
        at = end;
      }
    }
    nfa.accepting.add(at);
  }
  return { nfa, start };
}

/** A minimal complete DFA: `next[state][symbol]` (symbols index `alphabet`), state 0 the start; `dead` accepts nothing. */
interface Dfa {
  alphabet: number[];
  next: number[][];
  accepting: boolean[];
  dead: number;
}

function determinize(nfa: Nfa, start: number): Dfa {
  const alphabet = [...new Set(nfa.edges.flatMap((edges) => [...edges.keys()]))].sort((a, b) => a - b);
  const ids = new Map<string, number>();
  const sets: Set<number>[] = [];
  const next: number[][] = [];
  const id = (set: Set<number>) => {
    const key = [...set].sort((a, b) => a - b).join(",");
    let found = ids.get(key);
    if (found === undefined) {
      ids.set(key, (found = sets.length));
      sets.push(set);
    }
    return found;
  };
  id(nfa.closure([start]));
  for (let s = 0; s < sets.length; s++) {
    next[s] = alphabet.map((c) => {
      const targets: number[] = [];
      for (const state of sets[s]!) {
        targets.push(...(nfa.edges[state]!.get(c) ?? []));
      }
      return id(nfa.closure(targets));
    });
  }
  const accepting = sets.map((set) => [...set].some((state) => nfa.accepting.has(state)));
  return minimize({ alphabet, next, accepting, dead: ids.get("") ?? -1 });
}

/** Moore's partition refinement over the complete DFA. */
function minimize(dfa: Dfa): Dfa {
  const n = dfa.next.length;
  let block: number[] = dfa.accepting.map((a) => (a ? 1 : 0));
  for (;;) {
    const keys = new Map<string, number>();
    const refined = Array.from({ length: n }, (_, s) => {
      const key = `${block[s]}|${dfa.next[s]!.map((t) => block[t]).join(",")}`;
      if (!keys.has(key)) keys.set(key, keys.size);
      return keys.get(key)!;
    });
    const before = new Set(block).size;
    block = refined;
    if (keys.size === before) break;
  }
  // Renumber with the start first.
  const order = new Map<number, number>([[block[0]!, 0]]);
  for (let s = 0; s < n; s++) if (!order.has(block[s]!)) order.set(block[s]!, order.size);
  const m = order.size;
  const next: number[][] = Array.from({ length: m }, () => []);
  const accepting: boolean[] = new Array(m).fill(false);
  for (let s = 0; s < n; s++) {
    const b = order.get(block[s]!)!;
    next[b] = dfa.next[s]!.map((t) => order.get(block[t]!)!);
    accepting[b] = dfa.accepting[s]!;
  }
  // The dead block: the one that accepts nothing ever (with no dead state in the NFA's DFA, none).
  const dead = dfa.dead >= 0 ? order.get(block[dfa.dead]!)! : -1;
  return { alphabet: dfa.alphabet, next, accepting, dead };
}

/** An EBNF string literal of one character. */
function charLiteral(c: number): string {
  const s = String.fromCodePoint(c);
  if (s === '"' || s === "\\") return `"\\${s}"`;
  if (c < 0x20 || c === 0x7f) return `"\\x${c.toString(16).padStart(2, "0")}"`;
  return `"${s}"`;
}

const PRINTABLE_IN_CLASS = (c: number) => c >= 0x20 && c < 0x7f && !"]\\^-".includes(String.fromCharCode(c));

/**
 * The characters as EBNF alternatives: printable ASCII ones in one class (ranges where they run),
 * any others one literal each (xgrammar 0.1.27 mis-compiles classes past U+07FF).
 */
function charChoices(chars: number[]): string[] {
  const inClass = chars.filter(PRINTABLE_IN_CLASS);
  const alone = chars.filter((c) => !PRINTABLE_IN_CLASS(c));
  const out: string[] = [];
  if (inClass.length === 1) alone.unshift(inClass[0]!);
  else if (inClass.length > 1) {
    let text = "";
    for (let i = 0; i < inClass.length; i++) {
      let j = i;
      while (j + 1 < inClass.length && inClass[j + 1] === inClass[j]! + 1) j++;
      text += j - i >= 2 ? `${String.fromCharCode(inClass[i]!)}-${String.fromCharCode(inClass[j]!)}` : inClass.slice(i, j + 1).map((c) => String.fromCharCode(c)).join("");
      i = j;
    }
    out.push(`[${text}]`);
  }
  return [...out, ...alone.map(charLiteral)];
}

function write(dfa: Dfa, state: number, path: Set<number>): string {
  if (path.has(state)) throw new Error("regularGrammar: a cycle through several states cannot be written inline");
  path.add(state);
  const loop: number[] = [];
  const byTarget = new Map<number, number[]>();
  dfa.next[state]!.forEach((target, i) => {
    const c = dfa.alphabet[i]!;
    if (target === dfa.dead) return;
    if (target === state) loop.push(c);
    else byTarget.set(target, [...(byTarget.get(target) ?? []), c]);
  });
  const branches: string[] = [];
  for (const [target, chars] of byTarget) {
    const rest = write(dfa, target, path);
    for (const choice of charChoices(chars)) branches.push(rest === "" ? choice : `${choice} ${rest}`);
  }
  path.delete(state);
  let body = branches.length === 0 ? "" : branches.length === 1 ? branches[0]! : `(${branches.join(" | ")})`;
  if (dfa.accepting[state] && body !== "") body = `(${body})?`;
  if (loop.length > 0) {
    const choices = charChoices(loop);
    const star = `${choices.length === 1 ? choices[0] : `(${choices.join(" | ")})`}*`;
    body = body === "" ? star : `${star} ${body}`;
  }
  return body;
}

/** The EBNF expression (parenthesized) of the union of the sequences; throws for an empty language or the empty string alone. */
export function regularGrammar(sequences: readonly (readonly Atom[])[]): string {
  const { nfa, start } = buildNfa(sequences);
  const dfa = determinize(nfa, start);
  if (dfa.dead === 0 || (dfa.next[0]!.every((t) => t === dfa.dead) && !dfa.accepting[0])) throw new Error("regularGrammar: the language is empty");
  const body = write(dfa, 0, new Set());
  if (body === "") throw new Error("regularGrammar: the language is the empty string alone");
  return `(${body})`;
}
