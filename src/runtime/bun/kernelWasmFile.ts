// The `type: "file"` import makes `bun build --compile` embed the module in the single binary.
import wasmPath from "../../../wasm/ctxr_kernels.wasm" with { type: "file" };

export default wasmPath;
