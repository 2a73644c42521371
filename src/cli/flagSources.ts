/**
 * Where a flag's value may come from besides the command line: an environment
 * variable CTXR_<FLAG> (the long name in upper snake case) and a config file
 * (--config FILE, JSON or YAML, keys the long names). Precedence: command line >
 * environment > config file > the command's default. Pure: the caller reads the
 * environment and the file (configFile.ts) and passes them in.
 */
import { InputError, UsageError, type FlagSpec, type ParsedFlags } from "./args.ts";

/** A flag spec entry; `multiple` marks a repeatable flag (parseArgs collects an array). */
export type SourcedFlagSpec = Record<string, FlagSpec[string] & { multiple?: boolean }>;

/** Old flag names still accepted, each mapped to its new name. */
export type FlagAliases = Record<string, string>;

/** Flags that name where the others come from, or that are not settings. */
const NOT_SETTINGS = new Set(["help", "config"]);

/** Flags whose values are never echoed in a message. */
const SECRET_FLAGS = new Set(["api-key", "upstream-key", "kv-remote-secret"]);

export function envName(flag: string): string {
  return `CTXR_${flag.toUpperCase().replace(/-/g, "_")}`;
}

/** A config file's parsed contents and the name to show in messages. */
export interface ConfigValues {
  file: string;
  values: Record<string, unknown>;
}

export interface SourcedFlags extends ParsedFlags {
  /** For each value not from the command line, where it came from: "CTXR_PORT=abc", "config.json: port". */
  origins: Record<string, string>;
  /** Deprecation notes for old flag names used anywhere. */
  notes: string[];
  /** New names of flags the command line gave by an old name, mapped to that name. */
  typedAs: Record<string, string>;
}

/** ParsedFlags' value type; a repeatable flag's array is stored there as parseArgs stores it. */
type FlagValue = ParsedFlags["values"][string];

const TRUE_WORDS = new Set(["1", "true", "yes", "on"]);
const FALSE_WORDS = new Set(["0", "false", "no", "off"]);

/**
 * Rewrites old flag names on the command line (`--block-tokens 5`, `--block-tokens=5`)
 * to their new names, with a note for each.
 */
export function renameAliasedArgs(args: readonly string[], aliases: FlagAliases, command: string): { args: string[]; notes: string[]; typedAs: Record<string, string> } {
  const notes: string[] = [];
  const typedAs: Record<string, string> = {};
  const renamed = args.map((arg) => {
    if (arg === "--") return arg;
    const match = /^--([^=]+)(=.*)?$/.exec(arg);
    const target = match === null ? undefined : aliases[match[1]!];
    if (target === undefined) return arg;
    notes.push(deprecationNote(command, `--${match![1]}`, `--${target}`));
    typedAs[target] = match![1]!;
    return `--${target}${match![2] ?? ""}`;
  });
  return { args: renamed, notes, typedAs };
}

function deprecationNote(command: string, old: string, current: string): string {
  return `ctxr ${command}: note: ${old} is an old name of ${current}; it still works, but use ${current}\n`;
}

/** The command line's flags, then the environment's, then the config file's, each where the ones before left a flag unset. */
export function layerFlagSources(
  cli: ParsedFlags,
  spec: SourcedFlagSpec,
  command: string,
  env: Record<string, string | undefined>,
  config: ConfigValues | null,
  aliases: FlagAliases = {},
): SourcedFlags {
  const values: ParsedFlags["values"] = { ...cli.values };
  const origins: Record<string, string> = {};
  const notes: string[] = [];
  const settable = Object.keys(spec).filter((name) => !NOT_SETTINGS.has(name));
  const isSet = (name: string) => values[name] !== undefined && values[name] !== false;

  for (const name of settable) {
    if (isSet(name)) continue;
    for (const variable of [envName(name), ...aliasesOf(name, aliases).map(envName)]) {
      const raw = env[variable];
      if (raw === undefined || raw === "") continue;
      const origin = `${variable}=${SECRET_FLAGS.has(name) ? "…" : raw}`;
      values[name] = envValue(raw, spec[name]!, origin, name, command) as FlagValue;
      if (values[name] !== undefined) origins[name] = origin;
      if (variable !== envName(name)) notes.push(deprecationNote(command, variable, envName(name)));
      break;
    }
  }

  if (config !== null) {
    const seen = new Map<string, string>();
    for (const [key, raw] of Object.entries(config.values)) {
      const spelled = key.replace(/_/g, "-");
      const name = aliases[spelled] ?? spelled;
      if (!settable.includes(name)) throw new InputError(`${config.file}: unknown key '${key}' (ctxr ${command} has no --${spelled})`);
      if (seen.has(name)) throw new InputError(`${config.file}: '${key}' and '${seen.get(name)}' set the same option, --${name}`);
      seen.set(name, key);
      if (name !== spelled) notes.push(deprecationNote(command, `${config.file}: ${key}`, name));
      if (isSet(name)) continue;
      const origin = `${config.file}: ${key}`;
      values[name] = configValue(raw, spec[name]!, origin, name) as FlagValue;
      if (values[name] !== undefined) origins[name] = origin;
    }
  }
  return { values, positionals: cli.positionals, origins, notes, typedAs: {} };
}

function aliasesOf(name: string, aliases: FlagAliases): string[] {
  return Object.keys(aliases).filter((alias) => aliases[alias] === name);
}

function envValue(raw: string, flag: SourcedFlagSpec[string], origin: string, name: string, command: string): string | boolean | string[] | undefined {
  if (flag.type === "boolean") {
    const word = raw.trim().toLowerCase();
    if (TRUE_WORDS.has(word)) return true;
    if (FALSE_WORDS.has(word)) return undefined;
    throw new UsageError(`${origin}: --${name} is a switch: give 1 or true to turn it on, 0 or false to leave it off`, command);
  }
  // Repeatable flags: one value per space-separated word (URLs hold no spaces).
  if (flag.multiple) return raw.trim().split(/\s+/);
  return raw;
}

function configValue(raw: unknown, flag: SourcedFlagSpec[string], origin: string, name: string): string | boolean | string[] | undefined {
  if (flag.type === "boolean") {
    if (typeof raw !== "boolean") throw new InputError(`${origin}: --${name} is a switch: expected true or false, got ${describe(raw)}`);
    return raw ? true : undefined;
  }
  if (flag.multiple) {
    const list = Array.isArray(raw) ? raw : [raw];
    if (list.length === 0) throw new InputError(`${origin}: expected one value or a list of values, got an empty list`);
    return list.map((item, index) => scalar(item, `${origin}[${index}]`));
  }
  return scalar(raw, origin);
}

function scalar(raw: unknown, origin: string): string {
  if (typeof raw === "string") return raw;
  if (typeof raw === "number" && Number.isFinite(raw)) return String(raw);
  throw new InputError(`${origin}: expected a string or a number, got ${describe(raw)}`);
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "a list";
  if (typeof value === "object") return "an object";
  return `${typeof value} ${JSON.stringify(value)}`;
}

/**
 * A usage error about a flag, told as the user gave it: prefixed with where a value
 * set outside the command line came from ("CTXR_PORT=abc: --port must be ..."; the
 * flag is the first one the message names), and with old names as typed.
 */
export function attributeToSource(error: unknown, flags: Pick<SourcedFlags, "origins" | "typedAs">): unknown {
  if (!(error instanceof UsageError)) return error;
  let message = error.message;
  for (const [name, typed] of Object.entries(flags.typedAs)) message = message.replaceAll(`--${name}`, `--${typed}`);
  const flag = /--([a-z0-9-]+)/.exec(error.message)?.[1];
  const origin = flag === undefined ? undefined : flags.origins[flag];
  if (origin !== undefined) message = `${origin}: ${message}`;
  return message === error.message ? error : new UsageError(message, error.command);
}
