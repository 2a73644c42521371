/**
 * A HubError says what went wrong fetching a model by name (a bad reference, a refusal by the
 * hub, a download that could not finish, a file missing from the cache in offline mode) and
 * what to do about it; the CLI prints its message as is.
 */
export class HubError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "HubError";
  }
}

/** The hub could not be reached at all (no answer, not an HTTP error): the cache may still serve. */
export class HubUnreachableError extends HubError {
  constructor(message: string) {
    super(message);
    this.name = "HubUnreachableError";
  }
}
