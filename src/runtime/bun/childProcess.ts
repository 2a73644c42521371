import type { ChildProcesses } from "../childProcessTypes.ts";

export const bunChildProcesses: ChildProcesses = {
  spawnPiped: (argv, options) => Bun.spawn([...argv], { stdin: "pipe", stdout: "pipe", stderr: "pipe", env: options.env, cwd: options.cwd }),
  runSync(argv) {
    const result = Bun.spawnSync([...argv], { stdout: "pipe", stderr: "pipe" });
    return { exitCode: result.exitCode, stdout: result.stdout.toString(), stderr: result.stderr.toString() };
  },
  which: (command) => Bun.which(command),
  scriptCommand: (entry) => [process.execPath, entry],
};
