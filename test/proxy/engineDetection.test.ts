import { describe, expect, test } from "bun:test";
import { detectEngine, engineLabel } from "../../src/proxy/engineDetection.ts";

const models = (ownedBy: string) => ({ object: "list", data: [{ id: "m", object: "model", owned_by: ownedBy }] });

describe("detectEngine", () => {
  test("vLLM by its models' owner, with /version's version", () => {
    const detected = detectEngine({ "/v1/models": models("vllm"), "/version": { version: "0.9.1" } });
    expect(detected).toEqual({ engine: "vllm", name: "vLLM", version: "0.9.1" });
    expect(engineLabel(detected)).toBe("vLLM 0.9.1");
    expect(detectEngine({ "/v1/models": models("vllm") }).version).toBeNull();
  });

  test("SGLang by /get_model_info (with /get_server_info or /server_info for the version)", () => {
    expect(detectEngine({ "/v1/models": models("sglang"), "/get_model_info": { model_path: "q", is_generation: true }, "/get_server_info": { version: "0.4.9" } })).toEqual({ engine: "sglang", name: "SGLang", version: "0.4.9" });
    expect(detectEngine({ "/get_model_info": { model_path: "q" }, "/server_info": { version: "0.5.0" } })).toEqual({ engine: "sglang", name: "SGLang", version: "0.5.0" });
  });

  test("llama.cpp by /props, its build as the version", () => {
    expect(detectEngine({ "/v1/models": models("llamacpp"), "/props": { default_generation_settings: {}, total_slots: 1, build_info: "b8681" }, "/health": { status: "ok" } })).toEqual({ engine: "llamacpp", name: "llama.cpp", version: "b8681" });
  });

  test("ctxr serve --model by its models' owner; anything else is an OpenAI-compatible API", () => {
    expect(detectEngine({ "/v1/models": models("ctxr") })).toEqual({ engine: "openai", name: "ctxr", version: null });
    for (const answers of [{}, { "/v1/models": models("openai") }, { "/props": "not an object" }, { "/get_model_info": { is_generation: true } }, { "/v1/models": { data: "x" } }]) {
      expect(detectEngine(answers)).toEqual({ engine: "openai", name: null, version: null });
    }
    expect(engineLabel(detectEngine({}))).toBe("an OpenAI-compatible API");
  });
});
