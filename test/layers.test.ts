/**
 * The layer check (scripts/check-layers.ts): src/ itself follows the layer order with no two-file
 * circles, and the checker finds each kind of violation in a synthetic tree.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { scanImports } from "../scripts/layers/importScanner.ts";
import { LAYER_ORDER } from "../scripts/layers/layerOrder.ts";
import { checkLayers, layerOf } from "../scripts/layers/layerRules.ts";
import { REPO_ROOT, runProgram } from "./helpers/cli.ts";

const CHECKER = join(REPO_ROOT, "scripts/check-layers.ts");
const trees: string[] = [];
afterAll(() => {
  for (const tree of trees) rmSync(tree, { recursive: true, force: true });
});

function tree(files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), "ctxr-layers-"));
  trees.push(root);
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  return root;
}

const check = (root: string) => runProgram([process.execPath, CHECKER, root]);

test("src/ follows the layer order and has no two files importing each other", () => {
  const run = check("src");
  expect(run.stdout + run.stderr).toStartWith("layers ok: src/");
  expect(run.code).toBe(0);
});

describe("on a synthetic tree", () => {
  test("reports upward imports of every form, two-file circles and folders without a layer, with file:line", () => {
    const root = tree({
      "http/errors.ts": ['const site = "http://example.com"; // import "../cli/a.ts" in a comment', 'import { serve } from "../server/app.ts";', "export const x = serve;"].join("\n"),
      "server/app.ts": 'import { x } from "../http/errors.ts";\nexport const serve = x;\n',
      "index/one.ts": 'import type { Two } from "./two.ts";\nexport type One = Two;\n',
      "index/two.ts": '/* import "../cli/no.ts" */\n\nimport {\n  type One,\n} from "./one.ts";\nexport type Two = One | 2;\n',
      "kernels/load.ts": 'export const later = () => import("../engine/big.ts");\nexport * from "../cli/main.ts";\nnew Worker(new URL("../proxy/worker.ts", import.meta.url));\n',
      "engine/big.ts": "export const big = 1;\n",
      "proxy/worker.ts": "export {};\n",
      "cli/main.ts": 'import "../server/app.ts";\n',
      "mystery/thing.ts": 'import "../http/errors.ts";\n',
    });
    const run = check(root);
    expect(run.code).toBe(1);
    expect(run.stdout.trimEnd().split("\n")).toEqual([
      `${root}/http/errors.ts:2: http/ imports server/app.ts from the higher layer server/`,
      `${root}/http/errors.ts:2: http/errors.ts and server/app.ts import each other (back at ${root}/server/app.ts:1)`,
      `${root}/index/one.ts:1: index/one.ts and index/two.ts import each other (back at ${root}/index/two.ts:5)`,
      `${root}/kernels/load.ts:1: kernels/ imports engine/big.ts from the higher layer engine/`,
      `${root}/kernels/load.ts:2: kernels/ imports cli/main.ts from the higher layer cli/`,
      `${root}/kernels/load.ts:3: kernels/ imports proxy/worker.ts from the higher layer proxy/`,
      `${root}/mystery/thing.ts:1: layer "mystery" is not in the layer order (scripts/layers/layerOrder.ts)`,
    ]);
    expect(run.stderr).toContain("7 layer violation(s)");
  });

  test("a tree that follows the order passes", () => {
    const root = tree({
      "version.ts": "export const VERSION = '1';\n",
      "http/errors.ts": 'import { VERSION } from "../version.ts";\nexport const x = VERSION;\n',
      "server/app.ts": 'import { x } from "../http/errors.ts";\nimport { y } from "./routes.ts";\nexport const app = x + y;\n',
      "server/routes.ts": "export const y = 1;\n",
    });
    const run = check(root);
    expect(run.stdout).toContain("layers ok");
    expect(run.code).toBe(0);
  });
});

describe("scanImports", () => {
  test("every import form, with the specifier's line; comments and strings that only look like imports are not imports", () => {
    const source = [
      'import a from "./a.ts";',
      "import {",
      "  b,",
      "  type C,",
      '} from "../b.ts";',
      'import type { D } from "./d.ts";',
      'import * as e from "./e.ts";',
      'import "./side.ts";',
      'export { f } from "./f.ts";',
      'export * from "./g.ts";',
      'export * as h from "./h.ts";',
      'const i = await import("./i.ts");',
      'type J = typeof import("./j.ts");',
      'new Worker(new URL("./k.ts", import.meta.url));',
      '// import x from "./commented.ts";',
      '/* export * from "./block.ts"; */',
      'const url = "http://x/"; const text = "import y from \'./in-string.ts\'";',
      'const template = `// not a comment ${"x"}`; import l from "./l.ts";',
      'import wasm from "../../wasm/m.wasm" with { type: "file" };',
    ].join("\n");
    expect(scanImports(source)).toEqual([
      { specifier: "./a.ts", line: 1 },
      { specifier: "../b.ts", line: 5 },
      { specifier: "./d.ts", line: 6 },
      { specifier: "./e.ts", line: 7 },
      { specifier: "./side.ts", line: 8 },
      { specifier: "./f.ts", line: 9 },
      { specifier: "./g.ts", line: 10 },
      { specifier: "./h.ts", line: 11 },
      { specifier: "./i.ts", line: 12 },
      { specifier: "./j.ts", line: 13 },
      { specifier: "./k.ts", line: 14 },
      { specifier: "./l.ts", line: 18 },
      { specifier: "../../wasm/m.wasm", line: 19 },
    ]);
  });
});

describe("checkLayers", () => {
  test("same-layer and downward imports pass; an upward one and a pair importing each other do not", () => {
    const order = ["low", "high"];
    const report = checkLayers(
      ["low/a.ts", "low/b.ts", "high/c.ts", "top.ts"],
      [
        { from: "high/c.ts", to: "low/a.ts", line: 1 },
        { from: "low/a.ts", to: "low/b.ts", line: 2 },
        { from: "low/b.ts", to: "low/a.ts", line: 7 },
        { from: "low/b.ts", to: "high/c.ts", line: 3 },
      ],
      order,
    );
    expect(report.upward).toEqual([{ from: "low/b.ts", to: "high/c.ts", line: 3, fromLayer: "low", toLayer: "high" }]);
    expect(report.circles).toEqual([{ a: "low/a.ts", b: "low/b.ts", line: 2, backLine: 7 }]);
    expect(report.unplaced).toEqual([{ file: "top.ts", layer: "top" }]);
  });

  test("a file directly in the root is a layer of its own name; every folder of src/ has a place in the order", () => {
    expect(layerOf("version.ts")).toBe("version");
    expect(layerOf("server/openai/chat.ts")).toBe("server");
    expect(new Set(LAYER_ORDER).size).toBe(LAYER_ORDER.length);
  });
});

test("the README's layout section shows the layer order as it is written in scripts/layers/layerOrder.ts", async () => {
  const readme = await Bun.file(join(REPO_ROOT, "README.md")).text();
  const layout = readme.slice(readme.indexOf("## Layout"), readme.indexOf("## Benchmarks"));
  expect(layout).toContain(`\n${LAYER_ORDER.join(" → ")}\n`);
  for (const layer of LAYER_ORDER) expect(layout).toContain(`src/${layer}`);
});
