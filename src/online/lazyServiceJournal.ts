/**
 * A journal whose directory is created only when the first change is written: the default data
 * directory (`./ctxr-data`) of a server that may never write there (a model server, a proxy
 * whose clients send no documents) is not created, so it neither litters the working folder
 * nor locks it against the next server started there. Changes made while the journal opens are
 * queued and appended in order; a failure to open (another server took the directory meanwhile)
 * fails every change, as a failed journal does.
 */
import type { ChangeRecord, ChangeSink, ServiceSnapshot } from "./serviceChanges.ts";
import { ServiceJournal } from "./serviceJournal.ts";

export class LazyServiceJournal implements ChangeSink {
  readonly report = null;
  private opened: ServiceJournal | null = null;
  /** Set once the changes queued while opening are appended: later ones go straight in. */
  private direct: ServiceJournal | null = null;
  private opening: Promise<ServiceJournal> | null = null;
  private queue: Promise<void> = Promise.resolve();
  private queued = 0;
  private failure: unknown = null;

  constructor(
    readonly dir: string,
    private readonly snapshotEvery?: number,
  ) {}

  /** Whether the directory has been opened (and so created). */
  get isOpen(): boolean {
    return this.opened !== null;
  }

  append(record: ChangeRecord, state: () => ServiceSnapshot): void {
    if (this.direct !== null) return this.direct.append(record, state);
    this.opening ??= this.open();
    this.queued++;
    this.queue = this.queue
      .then(() => this.opening!)
      .then((journal) => {
        journal.append(record, state);
        if (--this.queued === 0) this.direct = journal;
      })
      .catch((error) => {
        this.queued--;
        this.failure ??= error;
      });
  }

  get failureMessage(): string | null {
    if (this.failure !== null) return `journal write failed; changes are not durable: ${String(this.failure)}`;
    return this.opened?.failureMessage ?? null;
  }

  async flush(): Promise<void> {
    await this.queue;
    if (this.failure !== null) throw new Error(this.failureMessage!);
    await this.opened?.flush();
  }

  async close(finalState: () => ServiceSnapshot): Promise<void> {
    await this.queue;
    await this.opened?.close(finalState);
  }

  private async open(): Promise<ServiceJournal> {
    const journal = await ServiceJournal.open(this.dir, this.snapshotEvery);
    if (journal.recovered.snapshot !== null || journal.recovered.records.length > 0) {
      // Another server wrote here after this one started (and has stopped): its state is not in memory here.
      await journal.release();
      throw new Error(`data directory ${this.dir} was created and written by another server after this one started; restart this one to load that state`);
    }
    this.opened = journal;
    return journal;
  }
}
