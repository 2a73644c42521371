/** The saved-token report of this server: its engine's account, or its proxy's upstreams' accounts. */
import { savedTokensReport, type SavedTokensReport } from "../accounting/savedTokensReport.ts";
import type { GenerationEngine } from "../engine/generationEngine.ts";
import type { ContextProxy } from "../proxy/contextProxy.ts";

export function serverSavedTokens(engine: GenerationEngine | null | undefined, proxy: ContextProxy | null | undefined): SavedTokensReport {
  return savedTokensReport({
    ...(engine ? { engine: engine.tokenAccount } : {}),
    ...(proxy ? { upstreams: proxy.pool.upstreams.map((upstream) => ({ url: upstream.url, account: upstream.account })) } : {}),
  });
}
