/** The flags `ctxr serve --help` documents (the real CLI's answer), and the flags an argv uses. */
import { runCli } from "../helpers/cli.ts";

let documented: Set<string> | null = null;

export function documentedServeFlags(): Set<string> {
  if (documented !== null) return documented;
  const help = runCli(["serve", "--help"]);
  if (help.code !== 0) throw new Error(`ctxr serve --help failed (exit ${help.code}): ${help.stderr}`);
  documented = new Set(help.stdout.match(/(?<![\w-])--[a-z][a-z0-9-]*/g) ?? []);
  return documented;
}

/** The `--name` words of an argv (a `--name=value` word counts as --name). */
export function flagsUsed(argv: readonly string[]): string[] {
  return argv.filter((word) => word.startsWith("--")).map((word) => word.split("=")[0]!);
}
