/**
 * `hf:ORG/REPO[:QUANT|FILE][@REV]`: a model on the Hugging Face Hub by name. The part after the
 * repository picks a GGUF file, by its quantization (`:Q4_K_M`) or its path in the repository
 * (`:model-Q4_K_M.gguf`); without it, hubFileChoice.ts picks a default. `@REV` names a branch,
 * tag or commit (default `main`), as `huggingface-cli download --revision`.
 */
import { HubError } from "./hubErrors.ts";

export const HUB_PREFIX = "hf:";

export interface HubReference {
  /** "ORG/REPO". */
  repo: string;
  /** The quantization tag or file path after the repository; null when none was given. */
  selector: string | null;
  /** The branch, tag or commit to fetch. */
  revision: string;
}

/** True when --model names a model on the hub rather than a local path. */
export function isHubReference(model: string): boolean {
  return model.startsWith(HUB_PREFIX);
}

// The hub's own rule for names: letters, digits, "-", "_", "." ; no "--" or ".." (the cache's
// folder name joins ORG and REPO with "--", so that rule also keeps the folder names unambiguous).
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

export const DEFAULT_REVISION = "main";

// A git ref name (git check-ref-format) or a commit: no "..", "//", "@{", no leading or trailing
// "/" or ".", no ".lock" ending; also the cache's refs/<revision> file stays inside refs/.
const REVISION = /^[A-Za-z0-9_][A-Za-z0-9._\/-]*$/;

function checkRevision(text: string, revision: string): void {
  const why =
    revision === ""
      ? "nothing after '@'"
      : !REVISION.test(revision) || revision.includes("..") || revision.includes("//") || revision.endsWith("/") || revision.endsWith(".") || revision.endsWith(".lock") || revision.split("/").some((part) => part.startsWith("."))
        ? `'${revision}' is not a branch, tag or commit name (letters, digits, '.', '_', '-', '/')`
        : null;
  if (why !== null) throw new HubError(`'${text}': ${why}; write the revision as @main, @v1.0 or @<commit sha>`);
}

/** `defaultRevision` applies when the text has no @REV. */
export function parseHubReference(text: string, defaultRevision = DEFAULT_REVISION): HubReference {
  const usage = `write it as hf:ORG/REPO, hf:ORG/REPO:QUANT (e.g. :Q4_K_M) or hf:ORG/REPO:FILE.gguf, each with an optional @REVISION`;
  if (!isHubReference(text)) throw new HubError(`'${text}' is not a model on the hub: ${usage}`);
  const whole = text.slice(HUB_PREFIX.length);
  const at = whole.indexOf("@");
  const body = at < 0 ? whole : whole.slice(0, at);
  const revision = at < 0 ? defaultRevision : whole.slice(at + 1);
  checkRevision(text, revision);
  const colon = body.indexOf(":");
  const repo = colon < 0 ? body : body.slice(0, colon);
  const selector = colon < 0 ? null : body.slice(colon + 1);
  const parts = repo.split("/");
  if (parts.length !== 2 || !parts.every((part) => NAME.test(part) && !part.includes("--") && !part.includes(".."))) {
    throw new HubError(`'${text}': '${repo}' is not a repository name (ORG/REPO: letters, digits, '-', '_', '.'); ${usage}`);
  }
  if (selector !== null) {
    if (selector === "") throw new HubError(`'${text}': nothing after ':'; ${usage}`);
    const segments = selector.split("/");
    if (selector.startsWith("/") || segments.some((segment) => segment === "" || segment === "." || segment === "..")) {
      throw new HubError(`'${text}': '${selector}' is not a file path inside the repository`);
    }
  }
  return { repo, selector, revision };
}

/** The reference as the user writes it. */
export function formatHubReference(reference: HubReference): string {
  const selector = reference.selector === null ? "" : `:${reference.selector}`;
  const revision = reference.revision === DEFAULT_REVISION ? "" : `@${reference.revision}`;
  return `${HUB_PREFIX}${reference.repo}${selector}${revision}`;
}
