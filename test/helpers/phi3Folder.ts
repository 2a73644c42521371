/**
 * A Hugging Face Phi-3 folder (Phi3ForCausalLM) made from a tiny Llama folder: q|k|v fused into
 * self_attn.qkv_proj and gate|up into mlp.gate_up_proj (rows back to back, as Phi-3 stores them),
 * the other tensors and the tokenizer as they are. Without LongRoPE or partial rotary its logits
 * are the Llama folder's (both rotate halves of each head, as transformers does).
 */
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { encodeSafetensors, type TensorData } from "../../src/model/safetensors.ts";
import { openSafetensorsFolder } from "../../src/model/safetensorsFolder.ts";

const FUSED: Record<string, string[]> = {
  "self_attn.qkv_proj.weight": ["self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"],
  "mlp.gate_up_proj.weight": ["mlp.gate_proj.weight", "mlp.up_proj.weight"],
};

export function phi3FolderFromLlama(llamaFolder: string, out: string, configChanges: Record<string, unknown> = {}): string {
  const config = JSON.parse(readFileSync(join(llamaFolder, "config.json"), "utf8")) as Record<string, unknown>;
  const folder = openSafetensorsFolder(llamaFolder);
  const parts = new Set(Object.values(FUSED).flat());
  const tensors: TensorData[] = [];
  for (const [name, entry] of folder.tensors) {
    const layer = /^(model\.layers\.\d+\.)(.+)$/.exec(name);
    if (layer && parts.has(layer[2]!)) continue;
    tensors.push({ name, dtype: entry.dtype, shape: entry.shape, data: folder.readBytes(name) });
  }
  for (let l = 0; l < Number(config.num_hidden_layers); l++) {
    const prefix = `model.layers.${l}.`;
    for (const [fused, names] of Object.entries(FUSED)) {
      const entries = names.map((n) => folder.tensors.get(prefix + n)!);
      const rows = entries.reduce((sum, e) => sum + e.shape[0]!, 0);
      const data = new Uint8Array(entries.reduce((sum, e) => sum + (e.end - e.begin), 0));
      let at = 0;
      for (const n of names) {
        const bytes = folder.readBytes(prefix + n);
        data.set(bytes, at);
        at += bytes.length;
      }
      tensors.push({ name: prefix + fused, dtype: entries[0]!.dtype, shape: [rows, entries[0]!.shape[1]!], data });
    }
  }
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, "model.safetensors"), encodeSafetensors(tensors, { format: "pt" }));
  const phi3 = { ...config, architectures: ["Phi3ForCausalLM"], model_type: "phi3", ...configChanges };
  writeFileSync(join(out, "config.json"), JSON.stringify(phi3, null, 2));
  for (const file of ["tokenizer.json", "tokenizer_config.json"]) copyFileSync(join(llamaFolder, file), join(out, file));
  return out;
}
