export function denoStartModuleWorker(entry: string): Worker {
  const worker = new Worker(entry, { type: "module" });
  const terminate = worker.terminate.bind(worker);
  let closed = false;
  worker.terminate = () => {
    terminate();
    if (closed) return;
    closed = true;
    // Asynchronously, as Bun fires it.
    setTimeout(() => worker.dispatchEvent(new Event("close")), 0);
  };
  return worker;
}
