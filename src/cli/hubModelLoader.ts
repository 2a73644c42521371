/**
 * `hf:ORG/REPO[:QUANT|FILE][@REV]` on the command line (serve --model, model pull): the reference
 * checked, the environment read (HF_ENDPOINT, HF_TOKEN, CTXR_OFFLINE, HF_HUB_OFFLINE,
 * XDG_CACHE_HOME), the model fetched into the cache or found there, with progress on stderr.
 */
import { fetchHubModel, type HubModel } from "../model/hub/hubModel.ts";
import { HubError } from "../model/hub/hubErrors.ts";
import { parseHubReference } from "../model/hub/hubReference.ts";
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
