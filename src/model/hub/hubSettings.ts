/**
 * Where models come from and go: the hub's endpoint (HF_ENDPOINT), its token (HF_TOKEN),
 * offline mode (--offline, CTXR_OFFLINE=1 or HF_HUB_OFFLINE=1) and the cache folder
 * ($XDG_CACHE_HOME/ctxr/models, ~/.cache/ctxr/models when XDG_CACHE_HOME is unset).
 */
import { homedir } from "node:os";
import { isAbsolute, join } from "node:path";
import { HubError } from "./hubErrors.ts";

export const DEFAULT_HUB_ENDPOINT = "https://huggingface.co";

export interface HubSettings {
  /** The hub's base URL, without a trailing slash. */
  endpoint: string;
  /** Sent as "Authorization: Bearer" to the hub's own origin; null: none. */
  token: string | null;
  offline: boolean;
  /** The model cache's root folder. */
  cacheDir: string;
}

const TRUE_WORDS = new Set(["1", "true", "yes", "on"]);
const isSet = (value: string | undefined): boolean => value !== undefined && TRUE_WORDS.has(value.trim().toLowerCase());

/** The model cache folder for this environment. */
export function modelCacheDir(env: Record<string, string | undefined>): string {
  const xdg = env.XDG_CACHE_HOME;
  // The XDG spec ignores a relative XDG_CACHE_HOME.
  const base = xdg !== undefined && xdg !== "" && isAbsolute(xdg) ? xdg : join(env.HOME || homedir(), ".cache");
  return join(base, "ctxr", "models");
}

export function hubSettingsFromEnv(env: Record<string, string | undefined>, options: { offline?: boolean } = {}): HubSettings {
  const endpoint = (env.HF_ENDPOINT || DEFAULT_HUB_ENDPOINT).replace(/\/+$/, "");
  let parsed: URL;
  try {
    parsed = new URL(endpoint);
  } catch {
    throw new HubError(`HF_ENDPOINT '${env.HF_ENDPOINT}' is not a URL (e.g. ${DEFAULT_HUB_ENDPOINT})`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new HubError(`HF_ENDPOINT '${env.HF_ENDPOINT}' must be an http:// or https:// URL`);
  const token = env.HF_TOKEN || env.HUGGING_FACE_HUB_TOKEN || null;
  return {
    endpoint,
    token,
    offline: options.offline === true || isSet(env.CTXR_OFFLINE) || isSet(env.HF_HUB_OFFLINE),
    cacheDir: modelCacheDir(env),
  };
}
