/** Redis stream entry ids ("<ms>-<seq>") compared by value. */

export function compareStreamIds(a: string, b: string): number {
  const [aMs, aSeq] = splitId(a);
  const [bMs, bSeq] = splitId(b);
  if (aMs !== bMs) return aMs < bMs ? -1 : 1;
  return aSeq === bSeq ? 0 : aSeq < bSeq ? -1 : 1;
}

function splitId(id: string): [bigint, bigint] {
  const dash = id.indexOf("-");
  if (dash < 0) return [BigInt(id), 0n];
  return [BigInt(id.slice(0, dash)), BigInt(id.slice(dash + 1))];
}
