/**
 * systemd unit files and environment files as the service manager reads them, for the checks of
 * deploy/systemd/: sections of `Key=Value` lines (a key may repeat), `${NAME}` in ExecStart taken
 * from Environment=/EnvironmentFile= as one word, and the specifiers the units use.
 */

export type UnitFile = Map<string, Array<[key: string, value: string]>>;

export function parseUnitFile(text: string): UnitFile {
  const unit: UnitFile = new Map();
  let section: Array<[string, string]> | null = null;
  const lines = text.replace(/\\\n/g, " ").split("\n");
  lines.forEach((raw, index) => {
    const line = raw.trim();
    if (line === "" || line.startsWith("#") || line.startsWith(";")) return;
    const header = /^\[([^\]]+)\]$/.exec(line);
    if (header) {
      section = [];
      unit.set(header[1]!, section);
      return;
    }
    const equals = line.indexOf("=");
    if (section === null || equals <= 0) throw new Error(`unit file line ${index + 1}: not a [Section] or Key=Value line: ${line}`);
    section.push([line.slice(0, equals).trim(), line.slice(equals + 1).trim()]);
  });
  return unit;
}

/** Every value of `key` in `section`, in order. */
export function unitValues(unit: UnitFile, section: string, key: string): string[] {
  return (unit.get(section) ?? []).filter(([name]) => name === key).map(([, value]) => value);
}

/** The last value of `key` (a later assignment overrides an earlier one), or undefined. */
export function unitValue(unit: UnitFile, section: string, key: string): string | undefined {
  return unitValues(unit, section, key).at(-1);
}

/** KEY=VALUE lines of an EnvironmentFile (comments and blank lines skipped). */
export function parseEnvironmentFile(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const match = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line);
    if (!match) throw new Error(`environment file: not a KEY=VALUE line: ${line}`);
    env[match[1]!] = match[2]!;
  }
  return env;
}

/** Environment= assignments of [Service] (each `NAME=VALUE`, later ones winning). */
export function unitEnvironment(unit: UnitFile): Record<string, string> {
  const env: Record<string, string> = {};
  for (const assignment of unitValues(unit, "Service", "Environment")) {
    const equals = assignment.indexOf("=");
    env[assignment.slice(0, equals)] = assignment.slice(equals + 1);
  }
  return env;
}

/** %-specifiers: %S state root, %C cache root, %i instance name, %% a percent sign. */
export interface Specifiers {
  stateRoot: string;
  cacheRoot: string;
  instance?: string;
}

export function expandSpecifiers(text: string, specifiers: Specifiers): string {
  return text.replace(/%([%SCi])/g, (_, letter: string) => {
    if (letter === "%") return "%";
    if (letter === "S") return specifiers.stateRoot;
    if (letter === "C") return specifiers.cacheRoot;
    if (specifiers.instance === undefined) throw new Error("%i in a unit that is not a template instance");
    return specifiers.instance;
  });
}

/**
 * ExecStart's argv: words split at whitespace, `${NAME}` replaced by the variable as one word
 * (systemd's rule; `$NAME` would split it, and the units do not use it). An unset variable is an error here,
 * where systemd would pass an empty word.
 */
export function execStartArgv(command: string, env: Record<string, string>, specifiers: Specifiers): string[] {
  if (/["']/.test(command)) throw new Error("ExecStart quoting is not supported by this check: keep the units' ExecStart unquoted");
  return expandSpecifiers(command, specifiers)
    .trim()
    .split(/\s+/)
    .map((word) => {
      if (/\$[A-Za-z_]/.test(word)) throw new Error(`ExecStart word ${word}: use \${NAME}, the one-word form`);
      return word.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_, name: string) => {
        const value = env[name];
        if (value === undefined) throw new Error(`ExecStart uses \${${name}}, which neither Environment= nor the environment file sets`);
        return value;
      });
    });
}
