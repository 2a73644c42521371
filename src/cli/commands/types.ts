/** What a command may write to: stdout text, and whether stderr may show progress. */
export interface CommandIo {
  out(text: string): void;
  /** True when stderr is a terminal (progress bars allowed). */
  progress: boolean;
}

export type Command = (args: string[], io: CommandIo) => Promise<number>;
