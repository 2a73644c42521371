export function bunUnrefWorker(worker: Worker): void {
  worker.unref();
}
