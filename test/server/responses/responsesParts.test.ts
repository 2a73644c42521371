/**
 * The pure parts of /v1/responses and of its proxy route: the request's translation to chat
 * (input items, tools, text.format, fields named back), the output builder's events, the
 * byte-bounded response store with its item index, and the proxy's chat view of a request.
 */
import { describe, expect, test } from "bun:test";
import { ResponseOutputBuilder, type OutputEvent } from "../../../src/server/responses/responseOutput.ts";
import { ResponseStore } from "../../../src/server/responses/responseStore.ts";
import { chatFieldOrigin, itemsAsMessages, ResponsesInputError, translateResponsesRequest } from "../../../src/server/responses/responsesInput.ts";
import type { ResponsesBody } from "../../../src/server/responses/responsesSchema.ts";
import { responsesChatView } from "../../../src/proxy/responsesView.ts";

const none = () => undefined;
const translate = (body: Record<string, unknown>, previous: { role: string; content: string }[] | null = null) => translateResponsesRequest(body as ResponsesBody, previous, none);

describe("translateResponsesRequest", () => {
  test("instructions first, then the previous conversation, then the input; calls join the assistant message before them", () => {
    const { chat, conversation, origins } = translate(
      {
        instructions: "Rules",
        input: [
          { role: "developer", content: "Dev" },
          { type: "message", role: "assistant", content: [{ type: "output_text", text: "Let me check" }] },
          { type: "function_call", call_id: "c1", name: "f", arguments: "{}" },
          { type: "function_call", call_id: "c2", name: "g", arguments: '{"a":1}' },
          { type: "function_call_output", call_id: "c1", output: [{ type: "input_text", text: "one" }] },
        ],
        max_output_tokens: 5,
        text: { format: { type: "json_schema", name: "p", schema: { type: "object" }, strict: true } },
        tools: [{ type: "function", name: "f", parameters: { type: "object" }, strict: true }],
        tool_choice: { type: "function", name: "f" },
      },
      [{ role: "user", content: "Earlier" }],
    );
    expect(chat.messages).toEqual([
      { role: "system", content: "Rules" },
      { role: "user", content: "Earlier" },
      { role: "system", content: "Dev" },
      {
        role: "assistant",
        content: "Let me check",
        tool_calls: [
          { id: "c1", type: "function", function: { name: "f", arguments: "{}" } },
          { id: "c2", type: "function", function: { name: "g", arguments: '{"a":1}' } },
        ],
      },
      { role: "tool", tool_call_id: "c1", content: "one" },
    ]);
    expect(conversation).toHaveLength(4);
    expect(origins).toEqual(["instructions", "previous_response_id", "input[0]", "input[1]", "input[4]"]);
    expect(chat.max_tokens).toBe(5);
    expect(chat.response_format).toEqual({ type: "json_schema", json_schema: { name: "p", schema: { type: "object" }, strict: true } });
    expect(chat.tools).toEqual([{ type: "function", function: { name: "f", parameters: { type: "object" } } }]);
    expect(chat.tool_choice).toEqual({ type: "function", function: { name: "f" } });
  });

  test("an item_reference resolves to a stored item; an unresolved one names its id", () => {
    const stored = { type: "message", role: "assistant", content: [{ type: "output_text", text: "Stored" }] };
    const { chat } = translateResponsesRequest({ input: [{ type: "item_reference", id: "msg_1" }] } as ResponsesBody, null, (id) => (id === "msg_1" ? stored : undefined));
    expect(chat.messages).toEqual([{ role: "assistant", content: "Stored" }]);
    expect(() => translate({ input: [{ type: "item_reference", id: "msg_2" }] })).toThrow(ResponsesInputError);
  });

  test("fields the chat pipeline names come back as the Responses fields", () => {
    const origins = ["instructions", "input[0]", "input[3]"];
    expect(chatFieldOrigin("messages[2].tool_calls[0].function.arguments", origins)).toBe("input[3]");
    expect(chatFieldOrigin("tools[1].function.name", origins)).toBe("tools[1].name");
    expect(chatFieldOrigin("response_format.json_schema.schema", origins)).toBe("text.format.schema");
    expect(chatFieldOrigin("max_tokens", origins)).toBe("max_output_tokens");
    expect(chatFieldOrigin("prompt", origins)).toBe("input");
  });

  test("a response's output items become the assistant turn of a continuing conversation", () => {
    expect(itemsAsMessages([{ type: "message", role: "assistant", content: [{ type: "output_text", text: "Hi" }] }, { type: "function_call", call_id: "c", name: "f", arguments: "{}" }])).toEqual([
      { role: "assistant", content: "Hi", tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{}" } }] },
    ]);
  });
});

describe("ResponseOutputBuilder", () => {
  test("whitespace before a call opens no message; text after it opens one; events in the Responses order", () => {
    const events: OutputEvent[] = [];
    const builder = new ResponseOutputBuilder((event) => events.push(event), true);
    builder.push({ content: " \n", calls: [{ name: "f", arguments: "{}" }] });
    builder.push({ content: "done", calls: [] });
    builder.finish("completed");
    expect(builder.items.map((item) => item.type)).toEqual(["function_call", "message"]);
    expect(events.map((event) => event.type)).toEqual([
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
    ]);
    expect(events.map((event) => event.output_index)).toEqual([0, 0, 0, 0, 1, 1, 1, 1, 1, 1]);
  });

  test("no text at all: one empty message", () => {
    const builder = new ResponseOutputBuilder(() => {}, false);
    builder.finish("incomplete");
    expect(builder.items).toEqual([expect.objectContaining({ type: "message", status: "incomplete", content: [expect.objectContaining({ text: "" })] })]);
  });
});

describe("ResponseStore", () => {
  const stored = (text: string) => ({ conversation: [{ role: "user", content: text }], items: new Map([[`msg_${text.length}`, { type: "message", id: `msg_${text.length}` }]]) });

  test("over the byte budget the least recently used responses go, with their items", () => {
    const probe = new ResponseStore({ maxBytes: null });
    probe.put("resp_a", stored("a".repeat(1000)));
    // Room for two of these responses, not three.
    const budget = Math.floor(probe.bytes * 2.5);
    const store = new ResponseStore({ maxBytes: budget });
    store.put("resp_a", stored("a".repeat(1000)));
    store.put("resp_b", stored("b".repeat(1001)));
    expect(store.item("msg_1000")).toBeDefined();
    store.get("resp_a");
    store.put("resp_c", stored("c".repeat(1002)));
    expect(store.get("resp_b")).toBeUndefined();
    expect(store.item("msg_1001")).toBeUndefined();
    expect(store.get("resp_a")).toBeDefined();
    expect(store.get("resp_c")).toBeDefined();
    expect(store.evictedForByteBudget).toBe(1);
    expect(store.bytes).toBeLessThanOrEqual(budget);
  });

  test("a response alone over the budget is not kept", () => {
    const store = new ResponseStore({ maxBytes: 1000 });
    store.put("resp_big", stored("x".repeat(2000)));
    expect(store.size).toBe(0);
    expect(store.item("msg_2000")).toBeUndefined();
  });
});

describe("responsesChatView (proxy)", () => {
  test("the rewritten chat messages go back into instructions, message items and tool outputs; other items as sent", () => {
    const call = { type: "function_call", call_id: "c", name: "f", arguments: "{}" };
    const body = { model: "m", instructions: "Sys", input: [{ role: "user", content: [{ type: "input_text", text: "Q" }] }, call, { type: "function_call_output", call_id: "c", output: "R" }], documents: [] };
    const view = responsesChatView(body);
    expect(view.chat.messages).toEqual([
      { role: "system", content: "Sys" },
      { role: "user", content: [{ type: "text", text: "Q" }] },
      { role: "assistant", content: JSON.stringify(call) },
      { role: "tool", content: "R", tool_call_id: "c" },
    ]);
    expect(view.chat.input).toBeUndefined();
    const rewritten = { ...view.chat, messages: [{ role: "system", content: "Sys2" }, { role: "user", content: [{ type: "text", text: "DOCS" }, { type: "text", text: "Q" }] }, { role: "assistant", content: "x" }, { role: "tool", content: "R2" }] };
    delete (rewritten as Record<string, unknown>).documents;
    expect(view.restore(rewritten)).toEqual({
      model: "m",
      instructions: "Sys2",
      input: [{ role: "user", content: [{ type: "input_text", text: "DOCS" }, { type: "input_text", text: "Q" }] }, call, { type: "function_call_output", call_id: "c", output: "R2" }],
    });
  });

  test("a string input stays a string", () => {
    const view = responsesChatView({ input: "Q" });
    expect(view.restore({ messages: [{ role: "user", content: "D\\n\\nQ" }] })).toEqual({ input: "D\\n\\nQ" });
  });
});
