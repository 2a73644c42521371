/** A request the engine cannot serve as asked: the 400 (or 404) that names the request field at fault. */

/** `code`: the error body's (errors.ts picks one by default). */
export class InvalidRequest extends Error {
  constructor(
    readonly field: string,
    message: string,
    readonly status: 400 | 404 = 400,
    readonly code?: string,
  ) {
    super(`${field}: ${message}`);
  }
}
