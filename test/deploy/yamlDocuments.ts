/**
 * YAML files read the way Kubernetes reads them: Debian's python3-yaml (YAML 1.1, like the
 * API machinery's parser, where `on`, `yes` and `0755` are not strings), and Bun's YAML 1.2
 * parser beside it, so that a value the two read differently shows up as a difference.
 */
import { readFileSync } from "node:fs";
import { runProgram } from "../helpers/cli.ts";

const PYTHON_LOAD = "import json, sys, yaml\nprint(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]))";

export function yaml11Documents(path: string): unknown[] {
  const loaded = runProgram(["/usr/bin/python3", "-c", PYTHON_LOAD, path]);
  if (loaded.code !== 0) throw new Error(`python3 yaml could not read ${path} (apt-get install python3-yaml): ${loaded.stderr.trim()}`);
  return JSON.parse(loaded.stdout) as unknown[];
}

/** Documents split at `---` lines, each parsed by Bun's YAML 1.2 parser. */
export function yaml12Documents(path: string): unknown[] {
  return readFileSync(path, "utf8")
    .split(/^---[ \t]*$/m)
    .map((text) => Bun.YAML.parse(text))
    .filter((document) => document !== null && document !== undefined);
}
