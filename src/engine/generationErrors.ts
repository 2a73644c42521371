/** The ways a generation request is refused or ends without a result. */

/** A prompt (with max_tokens) that the model or cache cannot hold; `field` names the request field. */
export class PromptTooLongError extends Error {
  constructor(
    message: string,
    readonly field: "prompt" | "max_tokens",
    /** The prompt and max_tokens exceed the context length (else another bound of the request). */
    readonly overLength = false,
  ) {
    super(message);
    this.name = "PromptTooLongError";
  }
}

/** A request that was cut short by a runner failure (crash, internal error). */
export class GenerationFailedError extends Error {
  constructor(
    message: string,
    readonly cause?: unknown,
  ) {
    super(message);
    this.name = "GenerationFailedError";
  }
}

/** The waiting queue holds `limit` requests already; `retryAfterSeconds`: a guess at when to try again. */
export class QueueFullError extends Error {
  constructor(
    readonly limit: number,
    readonly retryAfterSeconds: number,
  ) {
    super(`${limit} requests are already waiting for the engine, the most that may wait`);
    this.name = "QueueFullError";
  }
}

/**
 * A request that had not finished by its deadline (it was cancelled); `field` names where the
 * deadline came from: "ctxr.deadline_ms" (the request's), or "" (the server's request timeout).
 */
export class DeadlineExceededError extends Error {
  constructor(
    readonly deadlineMs: number,
    readonly field: string,
    progress: string,
  ) {
    super(`the request did not finish within its deadline of ${deadlineMs} ms (${field === "" ? "the server's request timeout" : field}) and was cancelled; ${progress}`);
    this.name = "DeadlineExceededError";
  }
}

/** The scheduler was closed. */
export class SchedulerClosedError extends Error {
  constructor() {
    super("the generation engine is shutting down");
    this.name = "SchedulerClosedError";
  }
}
