/**
 * A command's flags from all their sources: the command line, CTXR_<FLAG>
 * environment variables and --config FILE (or CTXR_CONFIG). See flagSources.ts.
 */
import { UsageError, parseFlags } from "./args.ts";
import { readConfigFile } from "./configFile.ts";
import { attributeToSource, layerFlagSources, renameAliasedArgs, type FlagAliases, type SourcedFlagSpec, type SourcedFlags } from "./flagSources.ts";

/** Parses, then layers; call the command's work inside withFlagSources so its usage errors name their source. */
export function parseSourcedFlags(
  args: string[],
  spec: SourcedFlagSpec,
  command: string,
  env: Record<string, string | undefined> = process.env,
  aliases: FlagAliases = {},
  allowPositionals = false,
): SourcedFlags {
  const renamed = renameAliasedArgs(args, aliases, command);
  const cli = parseFlags(renamed.args, spec, command, allowPositionals);
  if (cli.values.help) return { ...cli, origins: {}, notes: renamed.notes, typedAs: renamed.typedAs };
  const configArg = cli.values.config;
  if (configArg === "") throw new UsageError("--config needs a file", command);
  const configFile = typeof configArg === "string" ? configArg : env.CTXR_CONFIG || undefined;
  const config = configFile === undefined ? null : readConfigFile(configFile);
  const layered = layerFlagSources(cli, spec, command, env, config, aliases);
  return { ...layered, notes: [...renamed.notes, ...layered.notes], typedAs: renamed.typedAs };
}

/** Runs a command's work on its flags; a usage error names where its flag's value came from. */
export async function withFlagSources<T>(flags: SourcedFlags, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw attributeToSource(error, flags);
  }
}
