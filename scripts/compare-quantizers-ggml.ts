/**
 * Our quantizers against ggml's own (libggml-base.so from node-llama-cpp, installed in a
 * scratch folder: see check-gguf-llamacpp.ts), through bun:ffi, on the same random rows:
 *
 *   - ggml quantizes, WE dequantize: the error must equal ggml's own round trip, which
 *     shows that our dequantizers read ggml's block layout;
 *   - ggml dequantizes what WE quantized: the same check the other way round;
 *   - the relative RMS error of our quantizer next to ggml's (ggml_quantize_chunk without
 *     an importance matrix).
 *
 *   npx bun scripts/compare-quantizers-ggml.ts [--lib /tmp/lcpp/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so]
 */
import { dlopen, FFIType, ptr } from "bun:ffi";
import { parseArgs } from "node:util";
import { NormalRandom } from "../src/model/normalRandom.ts";
import { dequantizeValues, quantizeValues } from "../src/model/gguf/ggufQuantize.ts";
import { GGML_TYPE, type GgmlTypeName, ggmlTensorBytes } from "../src/model/gguf/ggufTypes.ts";

const { values: args } = parseArgs({
  options: { lib: { type: "string", default: "/tmp/lcpp/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so" } },
});
const ggml = dlopen(args.lib!, {
  ggml_quantize_init: { args: [FFIType.i32], returns: FFIType.void },
  ggml_quantize_chunk: { args: [FFIType.i32, FFIType.ptr, FFIType.ptr, FFIType.i64, FFIType.i64, FFIType.i64, FFIType.ptr], returns: FFIType.u64 },
  dequantize_row_q8_0: { args: [FFIType.ptr, FFIType.ptr, FFIType.i64], returns: FFIType.void },
  dequantize_row_q4_0: { args: [FFIType.ptr, FFIType.ptr, FFIType.i64], returns: FFIType.void },
  dequantize_row_q4_K: { args: [FFIType.ptr, FFIType.ptr, FFIType.i64], returns: FFIType.void },
  dequantize_row_q6_K: { args: [FFIType.ptr, FFIType.ptr, FFIType.i64], returns: FFIType.void },
});
const dequantizeWithGgml: Record<string, (src: Uint8Array, dst: Float32Array, n: number) => void> = {
  Q8_0: (s, d, n) => ggml.symbols.dequantize_row_q8_0(ptr(s), ptr(d), n),
  Q4_0: (s, d, n) => ggml.symbols.dequantize_row_q4_0(ptr(s), ptr(d), n),
  Q4_K: (s, d, n) => ggml.symbols.dequantize_row_q4_K(ptr(s), ptr(d), n),
  Q6_K: (s, d, n) => ggml.symbols.dequantize_row_q6_K(ptr(s), ptr(d), n),
};

function relativeRms(a: Float32Array, b: Float32Array): number {
  let error = 0;
  let sum = 0;
  for (let i = 0; i < a.length; i++) {
    error += (a[i]! - b[i]!) ** 2;
    sum += a[i]! ** 2;
  }
  return Math.sqrt(error / sum);
}

const columns = 4096;
const rows = 256;
const results: Record<string, unknown>[] = [];
for (const std of [0.02, 1]) {
  const random = new NormalRandom(7, `rows-${std}`);
  const values = new Float32Array(rows * columns);
  for (let i = 0; i < values.length; i++) values[i] = std * random.next();
  for (const name of ["Q8_0", "Q4_0", "Q4_K", "Q6_K"] as GgmlTypeName[]) {
    const type = GGML_TYPE[name];
    ggml.symbols.ggml_quantize_init(type);
    const theirs = new Uint8Array(ggmlTensorBytes(type, [columns, rows]));
    const written = Number(ggml.symbols.ggml_quantize_chunk(type, ptr(values), ptr(theirs), 0, rows, columns, null));
    if (written !== theirs.length) throw new Error(`${name}: ggml wrote ${written} bytes, ${theirs.length} expected`);
    const ours = quantizeValues(type, values);
    const theirsByThem = new Float32Array(values.length);
    dequantizeWithGgml[name]!(theirs, theirsByThem, values.length);
    const theirsByUs = dequantizeValues(type, theirs, values.length);
    const oursByThem = new Float32Array(values.length);
    dequantizeWithGgml[name]!(ours, oursByThem, values.length);
    const oursByUs = dequantizeValues(type, ours, values.length);
    results.push({
      type: name,
      std,
      ggmlError: relativeRms(values, theirsByThem),
      oursError: relativeRms(values, oursByUs),
      ourDequantOfGgmlMatches: relativeRms(theirsByThem, theirsByUs),
      ggmlDequantOfOursMatches: relativeRms(oursByUs, oursByThem),
      sameBytes: Buffer.from(ours).equals(Buffer.from(theirs)),
    });
  }
}
for (const r of results) {
  console.log(
    `${String(r.type).padEnd(5)} std ${String(r.std).padEnd(5)} ggml ${((r.ggmlError as number) * 100).toFixed(3)}%  ours ${((r.oursError as number) * 100).toFixed(3)}%  ` +
      `layout: our dequant of ggml's bytes off by ${(r.ourDequantOfGgmlMatches as number).toExponential(1)}, ggml's dequant of ours off by ${(r.ggmlDequantOfOursMatches as number).toExponential(1)}${r.sameBytes ? " (identical bytes)" : ""}`,
  );
}
console.log(JSON.stringify(results));
