/**
 * Child process for the kill -9 test: opens the journal in DIR (recovering what a previous
 * child left), then appends records in a tight loop from CONCURRENCY workers, printing each
 * record's id to stdout once its append has resolved (it is acknowledged), and snapshotting
 * every SNAPSHOT_EVERY records. Runs until killed.
 *
 *   bun test/online/journal/crashChild.ts DIR [CONCURRENCY=16] [SNAPSHOT_EVERY=2000]
 *
 * A record's id is its seq; the state is the list of every id so far. The first stdout line
 * is `ready <ids recovered>`.
 */
import { Journal } from "../../../src/online/journal/journal.ts";

const [dir, concurrencyArg = "16", snapshotEveryArg = "2000"] = process.argv.slice(2);
if (!dir) throw new Error("usage: crashChild.ts DIR [CONCURRENCY] [SNAPSHOT_EVERY]");
const concurrency = Number(concurrencyArg);
const snapshotEvery = Number(snapshotEveryArg);
const padding = "p".repeat(450);

const { journal, recovered } = await Journal.open<number[], { id: number; text: string }>({ dir });
const state = [...(recovered.snapshot ?? []), ...recovered.records.map((record) => record.id)];
state.forEach((id, i) => {
  if (id !== i + 1) throw new Error(`recovered ids are not 1..${state.length}: position ${i} holds ${id}`);
});
if (journal.seq !== state.length) throw new Error(`journal.seq ${journal.seq} != ${state.length} recovered ids`);
process.stdout.write(`ready ${state.length}\n`);

function fail(error: unknown): never {
  process.stderr.write(`crashChild: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
}

async function worker(): Promise<void> {
  for (;;) {
    const id = journal.seq + 1;
    state.push(id);
    const durable = journal.append({ id, text: padding });
    if (journal.seq !== id) fail(new Error(`append gave seq ${journal.seq}, expected ${id}`));
    if (id % snapshotEvery === 0) journal.snapshot(state).catch(fail);
    await durable;
    process.stdout.write(`${id}\n`);
  }
}

await Promise.all(Array.from({ length: concurrency }, () => worker().catch(fail)));
