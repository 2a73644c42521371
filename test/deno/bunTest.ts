/**
 * "bun:test" under Deno (deno.json maps the specifier here): describe/test/hooks on Deno.test,
 * and jest's `expect` (the npm package, which bun:test's matchers follow) plus the two Bun-only
 * matchers the suites use. Each test is one Deno.test named "describe > ... > test"; hooks run as
 * in Bun: beforeAll before a scope's first test, afterAll after its last, beforeEach/afterEach
 * around each test from the outermost scope in. Timeouts are Bun's only (Deno has none per test).
 */
import { expect as jestExpect } from "expect";

type Hook = () => unknown;
type TestBody = () => unknown;

interface Scope {
  readonly parent: Scope | null;
  readonly name: string;
  readonly beforeAll: Hook[];
  readonly afterAll: Hook[];
  readonly beforeEach: Hook[];
  readonly afterEach: Hook[];
  /** Tests registered in this scope and the scopes inside it, and how many have run. */
  tests: number;
  finished: number;
  started: boolean;
  skipped: boolean;
}

interface DenoTestApi {
  test(definition: { name: string; fn: () => Promise<void>; ignore?: boolean; sanitizeOps?: boolean; sanitizeResources?: boolean; sanitizeExit?: boolean }): void;
}

const denoTest = (globalThis as unknown as { Deno: DenoTestApi }).Deno;

function newScope(parent: Scope | null, name: string, skipped: boolean): Scope {
  return { parent, name, beforeAll: [], afterAll: [], beforeEach: [], afterEach: [], tests: 0, finished: 0, started: false, skipped };
}

const fileScope = newScope(null, "", false);
let current = fileScope;

/** The scopes from the outermost in. */
function chain(scope: Scope): Scope[] {
  const scopes: Scope[] = [];
  for (let s: Scope | null = scope; s !== null; s = s.parent) scopes.unshift(s);
  return scopes;
}

async function runAll(hooks: readonly Hook[]): Promise<void> {
  for (const hook of hooks) await hook();
}

function register(name: string, body: TestBody, skip: boolean): void {
  const scope = current;
  const scopes = chain(scope);
  const ignore = skip || scopes.some((s) => s.skipped);
  if (!ignore) for (const s of scopes) s.tests++;
  denoTest.test({
    name: [...scopes.map((s) => s.name).filter((n) => n !== ""), name].join(" > "),
    ignore,
    sanitizeOps: false,
    sanitizeResources: false,
    sanitizeExit: false,
    async fn() {
      for (const s of scopes) {
        if (s.started) continue;
        s.started = true;
        await runAll(s.beforeAll);
      }
      try {
        for (const s of scopes) await runAll(s.beforeEach);
        await body();
      } finally {
        for (const s of [...scopes].reverse()) await runAll(s.afterEach);
        for (const s of [...scopes].reverse()) {
          s.finished++;
          if (s.finished === s.tests) await runAll(s.afterAll);
        }
      }
    },
  });
}

function defineScope(name: string, define: () => void, skipped: boolean): void {
  const parent = current;
  current = newScope(parent, name, skipped);
  try {
    define();
  } finally {
    current = parent;
  }
}

type TestFn = ((name: string, body: TestBody, timeoutMs?: number | object) => void) & {
  skip(name: string, body: TestBody, timeoutMs?: number | object): void;
  skipIf(condition: unknown): (name: string, body: TestBody, timeoutMs?: number | object) => void;
  if(condition: unknown): (name: string, body: TestBody, timeoutMs?: number | object) => void;
  each<T>(cases: readonly T[]): (name: string, body: (...args: never[]) => unknown, timeoutMs?: number | object) => void;
};

export const test: TestFn = Object.assign((name: string, body: TestBody) => register(name, body, false), {
  skip: (name: string, body: TestBody) => register(name, body, true),
  skipIf: (condition: unknown) => (name: string, body: TestBody) => register(name, body, Boolean(condition)),
  if: (condition: unknown) => (name: string, body: TestBody) => register(name, body, !condition),
  each:
    <T>(cases: readonly T[]) =>
    (name: string, body: (...args: never[]) => unknown) => {
      cases.forEach((testCase, index) => {
        const args = (Array.isArray(testCase) ? testCase : [testCase]) as never[];
        register(formatEachName(name, args, index), () => body(...args), false);
      });
    },
});

export const it = test;

/** Bun's printf-style test.each names (%s, %d, %i, %p, %j, %#). */
function formatEachName(name: string, args: readonly unknown[], index: number): string {
  let next = 0;
  return name.replace(/%[sdipjo#%]/g, (token) => {
    if (token === "%%") return "%";
    if (token === "%#") return String(index);
    const value = args[next++];
    return typeof value === "string" && token === "%s" ? value : JSON.stringify(value) ?? String(value);
  });
}

type DescribeFn = ((name: string, define: () => void) => void) & {
  skip(name: string, define: () => void): void;
  skipIf(condition: unknown): (name: string, define: () => void) => void;
  if(condition: unknown): (name: string, define: () => void) => void;
};

export const describe: DescribeFn = Object.assign((name: string, define: () => void) => defineScope(name, define, false), {
  skip: (name: string, define: () => void) => defineScope(name, define, true),
  skipIf: (condition: unknown) => (name: string, define: () => void) => defineScope(name, define, Boolean(condition)),
  if: (condition: unknown) => (name: string, define: () => void) => defineScope(name, define, !condition),
});

export function beforeAll(hook: Hook): void {
  current.beforeAll.push(hook);
}

export function afterAll(hook: Hook): void {
  current.afterAll.push(hook);
}

export function beforeEach(hook: Hook): void {
  current.beforeEach.push(hook);
}

export function afterEach(hook: Hook): void {
  current.afterEach.push(hook);
}

/** Bun's per-test timeout: Deno.test has none, so this only records nothing. */
export function setDefaultTimeout(_ms: number): void {}

jestExpect.extend({
  toStartWith(received: unknown, prefix: string) {
    const pass = typeof received === "string" && received.startsWith(prefix);
    return { pass, message: () => `expected ${JSON.stringify(received)} ${pass ? "not " : ""}to start with ${JSON.stringify(prefix)}` };
  },
  toEndWith(received: unknown, suffix: string) {
    const pass = typeof received === "string" && received.endsWith(suffix);
    return { pass, message: () => `expected ${JSON.stringify(received)} ${pass ? "not " : ""}to end with ${JSON.stringify(suffix)}` };
  },
});

export const expect = jestExpect;
