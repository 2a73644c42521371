/**
 * The /tokenize answer written as a stream of JSON text, a slice of tokens at a time, each token's
 * vocabulary string looked up as its slice is written. Building it whole (an array of millions of
 * strings, then one JSON text of it) took 1.48 GB for a 7 MB prompt (issue 27); this keeps one
 * slice's text at a time beside the ids.
 */

/** Tokens written per slice. */
const SLICE = 16_384;

export interface TokenizeAnswer {
  count: number;
  maxModelLen: number;
  tokens: readonly number[];
  /** Each token's vocabulary string (null: no token_strs). */
  tokenString: ((id: number) => string) | null;
}

function* answerText(answer: TokenizeAnswer): Generator<string> {
  const { tokens, tokenString } = answer;
  yield `{"count":${answer.count},"max_model_len":${answer.maxModelLen},"tokens":[`;
  for (let start = 0; start < tokens.length; start += SLICE) yield (start > 0 ? "," : "") + tokens.slice(start, start + SLICE).join(",");
  if (tokenString === null) {
    yield `],"token_strs":null}`;
    return;
  }
  yield `],"token_strs":[`;
  for (let start = 0; start < tokens.length; start += SLICE) {
    const strings = tokens.slice(start, start + SLICE).map((id) => JSON.stringify(tokenString(id)));
    yield (start > 0 ? "," : "") + strings.join(",");
  }
  yield "]}";
}

/** The answer's JSON as a byte stream, produced as the client reads it; `ended` runs once when it is written or cancelled. */
export function tokenizeAnswerStream(answer: TokenizeAnswer, ended: () => void = () => {}): ReadableStream<Uint8Array> {
  const parts = answerText(answer);
  const encoder = new TextEncoder();
  let done = false;
  const end = () => {
    if (done) return;
    done = true;
    ended();
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      // One slice per turn of the event loop: a million-token answer is written between other requests, not in one block.
      await new Promise<void>((resolve) => setImmediate(resolve));
      const next = parts.next();
      if (next.done) {
        controller.close();
        end();
      } else {
        controller.enqueue(encoder.encode(next.value));
      }
    },
    cancel: end,
  });
}
