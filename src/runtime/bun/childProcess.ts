import type { ChildProcesses } from "../childProcess.ts";

export const bunChildProcesses: ChildProcesses = {
  spawnPiped: (argv, env) => Bun.spawn([...argv], { stdin: "pipe", stdout: "pipe", stderr: "pipe", env }),
  runSync(argv) {
    const result = Bun.spawnSync([...argv], { stdout: "pipe", stderr: "pipe" });
    return { exitCode: result.exitCode, stdout: result.stdout.toString(), stderr: result.stderr.toString() };
  },
  which: (command) => Bun.which(command),
};
