/** Flag values from the command line, CTXR_<FLAG> and a config file: precedence, bad keys, bad values with their source. */
import { describe, expect, test } from "bun:test";
import { InputError, UsageError, integerFlag, parseFlags } from "../../src/cli/args.ts";
import { parseConfigText } from "../../src/cli/configFile.ts";
import { attributeToSource, envName, layerFlagSources, renameAliasedArgs, type SourcedFlagSpec } from "../../src/cli/flagSources.ts";

const SPEC: SourcedFlagSpec = {
  port: { type: "string" },
  "data-dir": { type: "string" },
  "in-memory": { type: "boolean" },
  upstream: { type: "string", multiple: true },
  "api-key": { type: "string" },
  "document-tokens": { type: "string" },
  config: { type: "string" },
  help: { type: "boolean", short: "h" },
};
const ALIASES = { "block-tokens": "document-tokens" };

function layer(args: string[], env: Record<string, string>, config: Record<string, unknown> | null) {
  const renamed = renameAliasedArgs(args, ALIASES, "serve");
  return layerFlagSources(parseFlags(renamed.args, SPEC, "serve"), SPEC, "serve", env, config === null ? null : { file: "config.json", values: config }, ALIASES);
}

describe("flag sources", () => {
  test("the environment variable of a flag is CTXR_ and its long name in upper snake case", () => {
    expect(envName("port")).toBe("CTXR_PORT");
    expect(envName("kv-remote-secret-file")).toBe("CTXR_KV_REMOTE_SECRET_FILE");
  });

  test("precedence: command line > environment > config file > default", () => {
    const config = { port: 1111, "data-dir": "from-file", document_tokens: 64 };
    const env = { CTXR_PORT: "2222", CTXR_DATA_DIR: "from-env" };
    expect(layer(["--port", "3333"], env, config).values).toMatchObject({ port: "3333", "data-dir": "from-env", "document-tokens": "64" });
    expect(layer([], env, config).values).toMatchObject({ port: "2222" });
    expect(layer([], {}, config).values).toMatchObject({ port: "1111", "data-dir": "from-file" });
    expect(layer([], {}, null).values.port).toBeUndefined();
    const origins = layer(["--port", "3333"], env, config).origins;
    expect(origins).toEqual({ "data-dir": "CTXR_DATA_DIR=from-env", "document-tokens": "config.json: document_tokens" });
  });

  test("switches and repeatable flags from the environment and the file", () => {
    expect(layer([], { CTXR_IN_MEMORY: "true" }, null).values["in-memory"]).toBe(true);
    expect(layer([], { CTXR_IN_MEMORY: "0" }, { "in-memory": true }).values["in-memory"]).toBe(true);
    expect(layer([], { CTXR_IN_MEMORY: "0" }, null).values["in-memory"]).toBeUndefined();
    expect(layer([], {}, { in_memory: false }).values["in-memory"]).toBeUndefined();
    expect(layer([], { CTXR_UPSTREAM: "http://a:1 http://b:2" }, null).values.upstream as unknown).toEqual(["http://a:1", "http://b:2"]);
    expect(layer([], {}, { upstream: ["http://a:1", "http://b:2"] }).values.upstream as unknown).toEqual(["http://a:1", "http://b:2"]);
    expect(layer([], {}, { upstream: "http://a:1" }).values.upstream as unknown).toEqual(["http://a:1"]);
    // The command line's list replaces the environment's, it does not add to it.
    expect(layer(["--upstream", "http://c:3"], { CTXR_UPSTREAM: "http://a:1" }, null).values.upstream as unknown).toEqual(["http://c:3"]);
    // An empty variable is unset, as shells write "FOO=" to clear one.
    expect(layer([], { CTXR_PORT: "" }, { port: 5 }).values.port).toBe("5");
  });

  test("unknown keys, --help and --config in the file are errors naming the key and the file", () => {
    expect(() => layer([], {}, { prot: 1 })).toThrow(new InputError("config.json: unknown key 'prot' (ctxr serve has no --prot)"));
    expect(() => layer([], {}, { config: "other.json" })).toThrow("config.json: unknown key 'config'");
    expect(() => layer([], {}, { help: true })).toThrow("config.json: unknown key 'help'");
    expect(() => layer([], {}, { "data-dir": "a", data_dir: "b" })).toThrow("config.json: 'data_dir' and 'data-dir' set the same option, --data-dir");
  });

  test("values of the wrong type are errors naming the file and the key", () => {
    expect(() => layer([], {}, { port: true })).toThrow("config.json: port: expected a string or a number, got boolean true");
    expect(() => layer([], {}, { port: null })).toThrow("config.json: port: expected a string or a number, got null");
    expect(() => layer([], {}, { port: [1] })).toThrow("config.json: port: expected a string or a number, got a list");
    expect(() => layer([], {}, { "in-memory": "yes" })).toThrow('config.json: in-memory: --in-memory is a switch: expected true or false, got string "yes"');
    expect(() => layer([], {}, { upstream: [] })).toThrow("config.json: upstream: expected one value or a list of values, got an empty list");
    expect(() => layer([], {}, { upstream: ["http://a:1", { url: "x" }] })).toThrow("config.json: upstream[1]: expected a string or a number, got an object");
    expect(() => layer([], { CTXR_IN_MEMORY: "maybe" }, null)).toThrow(new UsageError("CTXR_IN_MEMORY=maybe: --in-memory is a switch: give 1 or true to turn it on, 0 or false to leave it off", "serve"));
  });

  test("a bad value's usage error names where it came from; a secret's value is not shown", () => {
    const flags = layer([], { CTXR_PORT: "abc", CTXR_API_KEY: "sk-secret-value" }, { "data-dir": "" });
    const error = (): unknown => {
      try {
        integerFlag(flags, "port", "serve", 0);
      } catch (caught) {
        return attributeToSource(caught, { ...flags, typedAs: {} });
      }
      return null;
    };
    expect((error() as Error).message).toBe("CTXR_PORT=abc: --port must be a non-negative integer, got 'abc'");
    expect(flags.origins["api-key"]).toBe("CTXR_API_KEY=…");
    const fromFile = layer([], {}, { port: "x" });
    expect((attributeToSource(new UsageError("--port must be a number, got 'x'", "serve"), { ...fromFile, typedAs: {} }) as Error).message).toBe("config.json: port: --port must be a number, got 'x'");
    // A flag given on the command line keeps its plain message.
    const fromCli = layer(["--port", "x"], { CTXR_PORT: "1" }, null);
    const plain = new UsageError("--port must be a number, got 'x'", "serve");
    expect(attributeToSource(plain, { ...fromCli, typedAs: {} })).toBe(plain);
  });

  test("old flag names: renamed on the command line with a note, told back as typed, accepted in the environment and the file", () => {
    const renamed = renameAliasedArgs(["--block-tokens", "5", "--block-tokens=6", "--port", "1"], ALIASES, "serve");
    expect(renamed.args).toEqual(["--document-tokens", "5", "--document-tokens=6", "--port", "1"]);
    expect(renamed.notes[0]).toBe("ctxr serve: note: --block-tokens is an old name of --document-tokens; it still works, but use --document-tokens\n");
    expect((attributeToSource(new UsageError("--document-tokens must be a positive integer, got '0'"), { origins: {}, typedAs: renamed.typedAs }) as Error).message).toBe("--block-tokens must be a positive integer, got '0'");
    const env = layer([], { CTXR_BLOCK_TOKENS: "7" }, null);
    expect(env.values["document-tokens"]).toBe("7");
    expect(env.notes.join("")).toContain("CTXR_BLOCK_TOKENS is an old name of CTXR_DOCUMENT_TOKENS");
    const file = layer([], {}, { block_tokens: 8 });
    expect(file.values["document-tokens"]).toBe("8");
    expect(file.notes.join("")).toContain("config.json: block_tokens is an old name of document-tokens");
  });
});

describe("config file text", () => {
  test("JSON for .json names, YAML otherwise; an empty file sets nothing", () => {
    expect(parseConfigText('{"port": 8080, "in-memory": true}', "c.json")).toEqual({ port: 8080, "in-memory": true });
    expect(parseConfigText("port: 8080\nupstream:\n  - http://a:1\n  - http://b:2\n", "c.yaml")).toEqual({ port: 8080, upstream: ["http://a:1", "http://b:2"] });
    expect(parseConfigText("", "c.yml")).toEqual({});
  });

  test("malformed files and files that are not a mapping are errors naming the file", () => {
    expect(() => parseConfigText("{port: 1", "c.json")).toThrow("c.json: not valid JSON");
    expect(() => parseConfigText("port: [1, 2\n", "c.yaml")).toThrow("c.yaml: not valid YAML");
    expect(() => parseConfigText("- a\n- b\n", "c.yaml")).toThrow("c.yaml: expected a mapping of option names to values (e.g. port: 8765), got a list");
    expect(() => parseConfigText("8080", "c.json")).toThrow("c.json: expected a mapping of option names to values (e.g. port: 8765), got number");
  });
});
