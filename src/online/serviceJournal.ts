/**
 * The service's use of the journal: change records appended as they happen
 * (group-committed), `flush` before a response is acknowledged, and a snapshot
 * every `snapshotEvery` records and at shutdown.
 */
import type { ChangeRecord, ServiceSnapshot } from "./serviceChanges.ts";
import { Journal, type RecoveryReport } from "./journal/journal.ts";

/** Large enough that snapshots (a pause of ~0.1 s per 100,000 contexts) stay rare under load. */
export const DEFAULT_SNAPSHOT_EVERY = 200_000;

export class ServiceJournal {
  private lastAppend: Promise<void> = Promise.resolve();
  private failure: unknown = null;
  private sinceSnapshot = 0;
  private snapshotting: Promise<void> | null = null;

  private constructor(
    private readonly journal: Journal<ServiceSnapshot, ChangeRecord>,
    readonly recovered: { snapshot: ServiceSnapshot | null; records: ChangeRecord[] },
    readonly report: RecoveryReport,
    private readonly snapshotEvery: number,
  ) {}

  static async open(dir: string, snapshotEvery = DEFAULT_SNAPSHOT_EVERY): Promise<ServiceJournal> {
    const { journal, recovered } = await Journal.open<ServiceSnapshot, ChangeRecord>({ dir });
    return new ServiceJournal(journal, { snapshot: recovered.snapshot, records: recovered.records }, recovered.report, snapshotEvery);
  }

  /** Appends a change; `state` is called (synchronously, right after this change) when a snapshot is due. */
  append(record: ChangeRecord, state: () => ServiceSnapshot): void {
    this.lastAppend = this.journal.append(record).catch((error) => {
      this.failure ??= error;
    });
    this.sinceSnapshot++;
    if (this.sinceSnapshot >= this.snapshotEvery && this.snapshotting === null) {
      this.sinceSnapshot = 0;
      this.snapshotting = this.journal.snapshot(state()).finally(() => (this.snapshotting = null));
    }
  }

  /** Why the journal stopped accepting changes, or null while it is healthy. */
  get failureMessage(): string | null {
    return this.failure === null ? null : `journal write failed; changes are not durable: ${String(this.failure)}`;
  }

  /** Resolves once every change appended so far is on disk; throws if the journal failed. */
  async flush(): Promise<void> {
    await this.lastAppend;
    if (this.failure !== null) throw new Error(this.failureMessage!);
  }

  /** Closes without a final snapshot (nothing of this process's state belongs here). */
  async release(): Promise<void> {
    await this.lastAppend;
    await this.journal.close();
  }

  async close(finalState: () => ServiceSnapshot): Promise<void> {
    await this.lastAppend;
    await this.snapshotting;
    await this.journal.snapshot(finalState());
    await this.journal.close();
  }
}
