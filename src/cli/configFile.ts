/**
 * Reads a --config FILE: a JSON or YAML mapping of long option names to values
 * (vLLM's --config). .json files are JSON; .yaml/.yml, and any other name, YAML
 * (a superset of JSON), parsed by Bun's built-in YAML parser.
 */
import { readFileSync } from "node:fs";
import { InputError } from "./args.ts";
import type { ConfigValues } from "./flagSources.ts";

export function readConfigFile(file: string): ConfigValues {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new InputError(`--config ${file}: cannot read it (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  return { file, values: parseConfigText(text, file) };
}

export function parseConfigText(text: string, file: string): Record<string, unknown> {
  let parsed: unknown;
  const json = /\.json$/i.test(file);
  try {
    parsed = json ? JSON.parse(text) : parseYaml(text);
  } catch (error) {
    throw new InputError(`${file}: not valid ${json ? "JSON" : "YAML"}: ${(error as Error).message}`);
  }
  if (parsed === null || parsed === undefined) return {};
  if (typeof parsed !== "object" || Array.isArray(parsed)) {
    throw new InputError(`${file}: expected a mapping of option names to values (e.g. port: 8765), got ${Array.isArray(parsed) ? "a list" : typeof parsed}`);
  }
  return parsed as Record<string, unknown>;
}

function parseYaml(text: string): unknown {
  const bun = (globalThis as { Bun?: { YAML?: { parse(text: string): unknown } } }).Bun;
  if (bun?.YAML === undefined) throw new Error("this runtime has no YAML parser; write the file as JSON (a .json name)");
  return bun.YAML.parse(text);
}
