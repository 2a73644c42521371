/**
 * Request ids: ctxr issues "ctxr-<32 hex>"; engines report them with their own
 * decorations — OpenAI-style "cmpl-"/"chatcmpl-" prefixes, vLLM's
 * "-<index>-<hex>" suffixes — which `requestIdCandidates` strips.
 */
import { randomUUID } from "node:crypto";

export function newRequestId(): string {
  return `ctxr-${randomUUID().replaceAll("-", "")}`;
}

const ENGINE_PREFIX = /^(?:chatcmpl|cmpl)-/;
const VLLM_SUFFIX = /-\d+-[0-9a-f]{4,}$/i;

/** The id as given, then without an engine prefix, then also without a vLLM suffix. */
export function requestIdCandidates(reported: string): string[] {
  const candidates = [reported];
  const unprefixed = reported.replace(ENGINE_PREFIX, "");
  if (unprefixed !== reported) candidates.push(unprefixed);
  const unsuffixed = unprefixed.replace(VLLM_SUFFIX, "");
  if (unsuffixed !== unprefixed) candidates.push(unsuffixed);
  return candidates;
}
