/**
 * A Dockerfile read as BuildKit reads it, for the checks of deploy/Dockerfile: instructions
 * (line continuations joined, comments and parser directives skipped), grouped into stages, with
 * COPY's flags, sources and destination, and the JSON (exec) form of CMD, ENTRYPOINT and VOLUME.
 */

export interface Instruction {
  keyword: string;
  /** Everything after the keyword, continuations joined. */
  text: string;
  line: number;
}

export interface Stage {
  base: string;
  name: string | null;
  instructions: Instruction[];
}

export function parseDockerfile(source: string): Stage[] {
  const stages: Stage[] = [];
  const lines = source.split("\n");
  for (let index = 0; index < lines.length; index++) {
    const first = index;
    let text = lines[index]!;
    if (/^\s*#/.test(text) || text.trim() === "") continue;
    while (text.endsWith("\\") && index + 1 < lines.length) {
      index++;
      const next = lines[index]!;
      if (/^\s*#/.test(next)) continue;
      text = text.slice(0, -1) + " " + next.trim();
    }
    const match = /^\s*([A-Za-z]+)\s+(.*)$/.exec(text);
    if (!match) throw new Error(`Dockerfile line ${first + 1}: not an instruction: ${text}`);
    const instruction: Instruction = { keyword: match[1]!.toUpperCase(), text: match[2]!.trim(), line: first + 1 };
    if (instruction.keyword === "FROM") {
      const from = /^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$/i.exec(instruction.text);
      if (!from) throw new Error(`Dockerfile line ${first + 1}: FROM IMAGE [AS NAME] expected`);
      stages.push({ base: from[1]!, name: from[2] ?? null, instructions: [] });
    } else {
      const stage = stages.at(-1);
      if (stage === undefined) throw new Error(`Dockerfile line ${first + 1}: ${instruction.keyword} before the first FROM`);
      stage.instructions.push(instruction);
    }
  }
  return stages;
}

/** The JSON (exec) form of CMD/ENTRYPOINT/VOLUME; null for the shell form. */
export function execForm(instruction: Instruction): string[] | null {
  if (!instruction.text.startsWith("[")) return null;
  const parsed: unknown = JSON.parse(instruction.text);
  if (!Array.isArray(parsed) || !parsed.every((item) => typeof item === "string")) throw new Error(`Dockerfile line ${instruction.line}: a JSON list of strings expected`);
  return parsed;
}

export interface Copy {
  from: string | null;
  chown: string | null;
  sources: string[];
  destination: string;
}

export function parseCopy(instruction: Instruction): Copy {
  const words = instruction.text.split(/\s+/);
  const flags = new Map<string, string>();
  while (words[0]?.startsWith("--")) {
    const [name, value] = words.shift()!.slice(2).split("=", 2);
    flags.set(name!, value ?? "");
  }
  const paths = execForm({ ...instruction, text: words.join(" ") }) ?? words;
  if (paths.length < 2) throw new Error(`Dockerfile line ${instruction.line}: COPY needs a source and a destination`);
  return { from: flags.get("from") ?? null, chown: flags.get("chown") ?? null, sources: paths.slice(0, -1), destination: paths.at(-1)! };
}

/** Packages of `apt-get install` commands in a RUN text (options skipped). */
export function aptInstalled(runText: string): string[] {
  const packages: string[] = [];
  for (const command of runText.split(/&&|;/)) {
    const words = command.trim().split(/\s+/);
    const at = words.indexOf("install");
    if (words[0] !== "apt-get" || at < 0) continue;
    packages.push(...words.slice(at + 1).filter((word) => !word.startsWith("-")));
  }
  return packages;
}

/** The instructions of `keyword` in a stage. */
export function instructionsOf(stage: Stage, keyword: string): Instruction[] {
  return stage.instructions.filter((instruction) => instruction.keyword === keyword);
}
