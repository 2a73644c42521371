/** The embeddedFiles adapter's contract: what both runtimes' implementations provide. */

/** A file the single binary carries (a Bun.embeddedFiles entry, or a stand-in in tests). */
export interface EmbeddedFile {
  /** The name the bundler gave it, e.g. "ctxr-runner-cpu-p5ak8a34." */
  name: string;
  bytes(): Promise<Uint8Array>;
}
