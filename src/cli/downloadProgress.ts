/**
 * How a model download shows itself on stderr: a progress bar (cli-progress) when stderr is a
 * terminal, plain lines otherwise (a log or a CI run): one when a file starts, one when it ends.
 */
import { SingleBar } from "cli-progress";
import type { DownloadProgress } from "../model/hub/hubDownload.ts";

const mib = (bytes: number): string => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

export function downloadProgress(terminal: boolean, err: (text: string) => void): DownloadProgress {
  let bar: SingleBar | undefined;
  let file = "";
  let done = 0;
  let startedAt = 0;
  let startedWith = 0;
  return {
    start(name, total, already) {
      bar?.stop();
      bar = undefined;
      file = name;
      done = already;
      startedWith = already;
      startedAt = performance.now();
      if (terminal && total !== null) {
        bar = new SingleBar({
          stream: process.stderr,
          format: "{file} [{bar}] {percentage}% | {done}/{size} | {speed}",
          barsize: 30,
          hideCursor: false, // Ctrl-C must not leave the cursor hidden
          clearOnComplete: false,
        });
        bar.start(total, already, { file: name, done: mib(already), size: mib(total), speed: "" });
      } else {
        err(`ctxr: downloading ${name}${total === null ? "" : ` (${mib(total)})`}${already > 0 ? `, ${mib(already)} already here` : ""}\n`);
      }
    },
    advance(bytes) {
      done += bytes;
      if (bar) {
        const seconds = (performance.now() - startedAt) / 1000;
        bar.update(done, { done: mib(done), speed: seconds > 0 ? `${mib((done - startedWith) / seconds)}/s` : "" });
      }
    },
    note(text) {
      if (bar) bar.stop();
      err(`ctxr: ${text}\n`);
      if (bar) bar.start(bar.getTotal(), done, { file, done: mib(done), size: mib(bar.getTotal()), speed: "" });
    },
    end(name) {
      if (bar) {
        bar.stop();
        bar = undefined;
      }
      const seconds = (performance.now() - startedAt) / 1000;
      err(`ctxr: downloaded ${name}: ${mib(done - startedWith)} in ${seconds.toFixed(1)} s; checking its checksum\n`);
    },
  };
}
