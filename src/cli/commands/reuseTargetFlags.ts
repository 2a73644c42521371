/**
 * `ctxr serve --reuse-target-agreement A [--min-ratio R] [--max-ratio R]`: the recompute ratio
 * set by a quality target (docs/reuse-target.md). A target is steered by the live audit's
 * samples: without `--reuse-audit-rate` it turns the audit on at DEFAULT_TARGET_AUDIT_RATE, and
 * `--reuse-audit-rate 0` with a target is a usage error naming both.
 */
import { DEFAULT_MAX_RATIO, DEFAULT_MIN_RATIO, DEFAULT_TARGET_AUDIT_RATE, type ReuseTargetSettings } from "../../engine/reuseTarget.ts";
import { UsageError, numberFlag, type ParsedFlags } from "../args.ts";

export const REUSE_TARGET_FLAGS = ["reuse-target-agreement", "min-ratio", "max-ratio"] as const;

/** The settings, or null without --reuse-target-agreement. */
export function reuseTargetFromFlags(flags: ParsedFlags, command: string): ReuseTargetSettings | null {
  const raw = flags.values["reuse-target-agreement"];
  if (raw === undefined) {
    for (const name of ["min-ratio", "max-ratio"]) if (flags.values[name] !== undefined) throw new UsageError(`--${name} needs --reuse-target-agreement`, command);
    return null;
  }
  const target = numberFlag(flags, "reuse-target-agreement", command, 1, { min: 0, max: 1 });
  if (!(target > 0)) throw new UsageError(`--reuse-target-agreement must be above 0 and at most 1, got '${raw}'`, command);
  const minRatio = numberFlag(flags, "min-ratio", command, DEFAULT_MIN_RATIO, { min: 0, max: 1 });
  const maxRatio = numberFlag(flags, "max-ratio", command, DEFAULT_MAX_RATIO, { min: 0, max: 1 });
  if (minRatio > maxRatio) throw new UsageError(`--min-ratio (${minRatio}) must not be above --max-ratio (${maxRatio})`, command);
  const auditRate = flags.values["reuse-audit-rate"] === undefined ? DEFAULT_TARGET_AUDIT_RATE : numberFlag(flags, "reuse-audit-rate", command, 0, { min: 0, max: 1 });
  if (auditRate === 0) throw new UsageError("--reuse-target-agreement needs audit samples: --reuse-audit-rate must be above 0 (leave it out for the default)", command);
  return { target, minRatio, maxRatio, auditRate };
}
