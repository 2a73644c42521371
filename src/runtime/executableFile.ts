/** Whether a path is a regular file this process may execute (runtime-neutral: node:fs on both runtimes). */
import { accessSync, constants, statSync } from "node:fs";

export function isExecutableFile(path: string): boolean {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}
