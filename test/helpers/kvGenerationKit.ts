/** What the KV-managed generation HTTP tests share (test/server/kvGeneration*.test.ts): four documents and a chat over them. */
export const DOCS = [
  { id: "a", text: "The river Ouse floods the valley every spring, and the mill closes for a month." },
  { id: "b", text: "Mill workers moved to the upland farms during the flood, tending sheep until June." },
  { id: "c", text: "In 1887 a stone embankment was built; the floods have been smaller since then." },
  { id: "d", text: "The embankment's keeper lives in the old toll house by the bridge." },
];

/** A greedy 6-token chat asking about the mill, with `documents` (and `extra` fields). */
export const chatOverDocuments = (documents: readonly { id?: string; text: string }[], extra: Record<string, unknown> = {}) => ({
  messages: [
    { role: "system", content: "Answer from the documents." },
    { role: "user", content: "When does the mill close?" },
  ],
  documents,
  temperature: 0,
  max_tokens: 6,
  ...extra,
});
