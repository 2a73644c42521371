/**
 * Bun.serve closes a connection that writes nothing for its idle timeout. A request whose body
 * has been read waits as long as its handler needs, but a request without a body (a GET) is cut
 * while its handler waits on something slow, such as an upstream engine's answer. Such a handler
 * holds the timeout off while it waits and gives it back after; the connection keeps its idle
 * timeout for the time after the answer (an idle keep-alive connection is still closed).
 *
 * serve.ts registers each request's control; a request served another way (tests calling
 * app.fetch) has none, and holding it does nothing.
 */

/** Bun's default, set explicitly so that giving the timeout back restores the same value. */
export const SERVER_IDLE_TIMEOUT_S = 10;

const controls = new WeakMap<Request, (seconds: number) => void>();

/** Called by the server adapter for each request: `setIdleTimeout(0)` turns the timeout off. */
export function registerIdleTimeout(request: Request, setIdleTimeout: (seconds: number) => void): void {
  controls.set(request, setIdleTimeout);
}

/** Turns the request's idle timeout off until the returned function is called (once is enough). */
export function holdIdleTimeout(request: Request): () => void {
  const set = controls.get(request);
  if (set === undefined) return () => {};
  set(0);
  let released = false;
  return () => {
    if (released) return;
    released = true;
    set(SERVER_IDLE_TIMEOUT_S);
  };
}
