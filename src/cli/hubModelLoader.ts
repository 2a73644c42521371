/**
 * `hf:ORG/REPO[:QUANT|FILE][@REV]` on the command line (serve --model, model pull, model quantize,
 * model calibrate-sparse): the reference
 * checked, the environment read (HF_ENDPOINT, HF_TOKEN, CTXR_OFFLINE, HF_HUB_OFFLINE,
 * XDG_CACHE_HOME), the model fetched into the cache or found there, with progress on stderr.
 */
import { fetchHubModel, type HubModel } from "../model/hub/hubModel.ts";
import { HubError } from "../model/hub/hubErrors.ts";
import { isHubReference, parseHubReference } from "../model/hub/hubReference.ts";
import { hubSettingsFromEnv } from "../model/hub/hubSettings.ts";
import { UsageError } from "./args.ts";
import { downloadProgress } from "./downloadProgress.ts";

export async function loadHubModel(model: string, options: { offline: boolean; command: string; terminal: boolean; err(text: string): void }): Promise<HubModel> {
  let reference;
  let settings;
  try {
    reference = parseHubReference(model);
    settings = hubSettingsFromEnv(process.env, { offline: options.offline });
  } catch (error) {
    if (error instanceof HubError) throw new UsageError(error.message, options.command);
    throw error;
  }
  return fetchHubModel(reference, settings, { progress: downloadProgress(options.terminal, options.err) });
}

/**
 * A command's model argument as a local path (and, for a model by name, its repository's name
 * without the organization, e.g. for general.name): a model by name fetched into the cache (or
 * found there), any other text as it is. --offline typed on the command line applies only to a model
 * by name; set in the environment or a config file (`offlineFrom`), it is a standing setting that
 * a local path already satisfies.
 */
export async function localModelPath(
  model: string,
  options: { offline: boolean; offlineFrom?: string; command: string; terminal: boolean; err(text: string): void },
): Promise<{ path: string; repoName: string | null }> {
  if (isHubReference(model)) {
    const fetched = await loadHubModel(model, options);
    return { path: fetched.path, repoName: fetched.reference.repo.slice(fetched.reference.repo.indexOf("/") + 1) };
  }
  if (options.offline && options.offlineFrom === undefined) {
    throw new UsageError(`--offline applies to a model by name, hf:ORG/REPO[:QUANT|FILE][@REV]; '${model}' is a local path`, options.command);
  }
  return { path: model, repoName: null };
}
