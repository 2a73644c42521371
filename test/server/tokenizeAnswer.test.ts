/** src/server/tokenizeAnswer.ts: the /tokenize answer written a slice at a time, and its end signalled once. */
import { expect, test } from "bun:test";
import { tokenizeAnswerStream } from "../../src/server/tokenizeAnswer.ts";

const answer = (count: number) => ({ count, maxModelLen: 4096, tokens: Array.from({ length: count }, (_, i) => i % 7), tokenString: (id: number) => `t"${id}` });

test("the streamed text is the answer's JSON, and `ended` runs once when it is written", async () => {
  let ended = 0;
  const text = await new Response(tokenizeAnswerStream(answer(40_000), () => ended++)).text();
  const body = JSON.parse(text);
  expect(body.count).toBe(40_000);
  expect(body.tokens.slice(0, 8)).toEqual([0, 1, 2, 3, 4, 5, 6, 0]);
  expect(body.token_strs[8]).toBe('t"1');
  expect(body.token_strs.length).toBe(40_000);
  expect(ended).toBe(1);
});

test("a client that goes away: `ended` runs once, on cancel", async () => {
  let ended = 0;
  const reader = tokenizeAnswerStream(answer(40_000), () => ended++).getReader();
  await reader.read();
  await reader.cancel();
  expect(ended).toBe(1);
});
