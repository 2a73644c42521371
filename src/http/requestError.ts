/** A client mistake in one request field, detected below the HTTP layer; the error handler answers it with a 400 naming the field. */
export class RequestError extends Error {
  constructor(
    readonly field: string,
    problem: string,
  ) {
    super(`${field}: ${problem}`);
  }
}
