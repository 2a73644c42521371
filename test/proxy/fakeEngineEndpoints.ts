/**
 * The endpoints by which each engine is recognised, as a FakeUpstream's `custom` answers (the
 * real engines cannot be installed here): what vLLM, SGLang and llama.cpp's llama-server answer
 * on them, trimmed to the fields detection reads plus a few others. Every other request falls
 * through to the fake's OpenAI-compatible answers.
 */
import type { RecordedRequest } from "./fakeUpstream.ts";

type Respond = (request: RecordedRequest) => Response | undefined;

const modelList = (ownedBy: string) => Response.json({ object: "list", data: [{ id: "fake-model", object: "model", created: 1_700_000_000, owned_by: ownedBy, root: "fake-model", max_model_len: 4096 }] });

export function vllmEndpoints(version = "0.9.1"): Respond {
  return (request) => {
    if (request.method !== "GET") return undefined;
    if (request.path === "/v1/models") return modelList("vllm");
    if (request.path === "/version") return Response.json({ version });
    if (request.path === "/health") return new Response(null, { status: 200 });
    return undefined;
  };
}

export function sglangEndpoints(version = "0.4.9"): Respond {
  return (request) => {
    if (request.method !== "GET") return undefined;
    if (request.path === "/v1/models") return modelList("sglang");
    if (request.path === "/get_model_info") return Response.json({ model_path: "Qwen/Qwen2.5-0.5B-Instruct", tokenizer_path: "Qwen/Qwen2.5-0.5B-Instruct", is_generation: true });
    if (request.path === "/get_server_info") return Response.json({ model_path: "Qwen/Qwen2.5-0.5B-Instruct", tp_size: 1, version });
    if (request.path === "/health") return new Response(null, { status: 200 });
    return undefined;
  };
}

export function llamacppEndpoints(build = "b8681-Debian"): Respond {
  return (request) => {
    if (request.method !== "GET") return undefined;
    if (request.path === "/v1/models") return modelList("llamacpp");
    if (request.path === "/props") return Response.json({ default_generation_settings: { n_ctx: 4096 }, total_slots: 4, model_path: "/models/m.gguf", build_info: build, chat_template: "" });
    if (request.path === "/health") return Response.json({ status: "ok" });
    return undefined;
  };
}
