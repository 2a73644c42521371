export function bunSleep(ms: number): Promise<void> {
  return Bun.sleep(ms);
}
