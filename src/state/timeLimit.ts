/** An operation that must settle within a time limit (Redis calls: a hung server counts as unreachable). */

/** `operation`'s outcome, or the error `onTimeout` returns (it may also drop a connection) once `ms` pass first. */
export async function withinMs<T>(operation: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(onTimeout()), ms);
  });
  try {
    return await Promise.race([operation, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
