import { describe, expect, test } from "bun:test";
import { ChatMessagesError, messageContentText, normalizeChatMessages } from "../../src/chat/chatMessages.ts";

describe("normalizeChatMessages", () => {
  test("string content passes through; roles, names and tool call ids are kept", () => {
    expect(
      normalizeChatMessages([
        { role: "system", content: "Be brief." },
        { role: "user", content: "Hi", name: "ann" },
        { role: "assistant", content: "" },
        { role: "tool", content: "42", tool_call_id: "call_1" },
      ]),
    ).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "Hi", name: "ann" },
      { role: "assistant", content: "" },
      { role: "tool", content: "42", tool_call_id: "call_1" },
    ]);
  });

  test("an assistant's tool calls are kept with their arguments parsed, as templates take them", () => {
    const calls = [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Oslo"}' } }, { type: "function", function: { name: "now", arguments: "" } }];
    expect(normalizeChatMessages([{ role: "assistant", content: null, tool_calls: calls }])).toEqual([
      {
        role: "assistant",
        content: "",
        tool_calls: [
          { id: "call_1", type: "function", function: { name: "get_weather", arguments: { city: "Oslo" } } },
          { type: "function", function: { name: "now", arguments: {} } },
        ],
      },
    ]);
    expect(() => normalizeChatMessages([{ role: "assistant", tool_calls: [{ type: "function", function: { name: "f", arguments: "{oops" } }] }])).toThrow("messages[0].tool_calls[0].function.arguments must be a JSON string");
    expect(() => normalizeChatMessages([{ role: "assistant", tool_calls: [{ type: "function", function: {} }] }])).toThrow("messages[0].tool_calls[0].function must be an object with a name");
    expect(() => normalizeChatMessages([{ role: "tool", content: "x", tool_call_id: 5 }])).toThrow("messages[0].tool_call_id must be a string");
  });

  test("text parts are joined with newlines", () => {
    expect(
      normalizeChatMessages([
        {
          role: "user",
          content: [
            { type: "text", text: "first" },
            { type: "text", text: "日本 🎉" },
          ],
        },
        { role: "user", content: [] },
      ]),
    ).toEqual([
      { role: "user", content: "first\n日本 🎉" },
      { role: "user", content: "" },
    ]);
  });

  test("developer becomes system; an assistant's null content and refusal parts", () => {
    expect(
      normalizeChatMessages([
        { role: "developer", content: "Rules." },
        { role: "assistant", content: null, tool_calls: [] },
        { role: "assistant" },
        { role: "assistant", content: [{ type: "refusal", refusal: "No." }] },
      ]),
    ).toEqual([
      { role: "system", content: "Rules." },
      { role: "assistant", content: "", tool_calls: [] },
      { role: "assistant", content: "" },
      { role: "assistant", content: "No." },
    ]);
  });

  test("message fields it does not read are errors naming them; an assistant's refusal is its text", () => {
    expect(() => normalizeChatMessages([{ role: "assistant", content: "x", audio: { id: "a" } }])).toThrow("messages[0].audio: audio is not supported (text only)");
    expect(() => normalizeChatMessages([{ role: "assistant", content: null, function_call: { name: "f" } }])).toThrow("messages[0].function_call: deprecated by OpenAI; give tool_calls");
    expect(() => normalizeChatMessages([{ role: "user", content: "x", weight: 2 }])).toThrow("messages[0].weight: is not a chat message field this server knows");
    expect(normalizeChatMessages([{ role: "assistant", content: null, refusal: "I cannot help with that." }])).toEqual([{ role: "assistant", content: "I cannot help with that." }]);
  });

  test("unsupported parts are errors naming the message, part and type", () => {
    const image = [{ role: "user", content: [{ type: "text", text: "see" }, { type: "image_url", image_url: { url: "x" } }] }];
    expect(() => normalizeChatMessages(image)).toThrow(ChatMessagesError);
    expect(() => normalizeChatMessages(image)).toThrow('messages[0].content[1]: content part type "image_url" is not supported (only text parts are)');
    expect(() => normalizeChatMessages([{ role: "user", content: [{ type: "input_audio" }] }])).toThrow('"input_audio" is not supported');
    expect(() => normalizeChatMessages([{ role: "user", content: [{ type: "refusal", refusal: "x" }] }])).toThrow('"refusal" is not supported');
  });

  test("malformed messages are errors naming the field", () => {
    const fails = (messages: unknown, message: string) => expect(() => normalizeChatMessages(messages)).toThrow(message);
    fails(undefined, "messages must be an array, got undefined");
    fails({}, "messages must be an array, got an object");
    fails([], "messages must not be empty");
    fails(["hi"], 'messages[0] must be an object, got string "hi"');
    fails([{ content: "x" }], "messages[0].role must be a non-empty string, got undefined");
    fails([{ role: "", content: "x" }], "messages[0].role must be a non-empty string");
    fails([{ role: "user", content: "a" }, { role: "narrator", content: "x" }], 'messages[1].role: unknown role "narrator"; use one of system, developer, user, assistant, tool');
    fails([{ role: "function", content: "x", name: "f" }], 'messages[0].role: unknown role "function"');
    fails([{ role: "User", content: "x" }], 'messages[0].role: unknown role "User"');
    fails([{ role: "user", content: "a" }, { role: "user" }], "messages[1].content is missing; a user message needs text");
    fails([{ role: "user", content: null }], "messages[0].content is missing");
    fails([{ role: "user", content: 5 }], "messages[0].content must be a string or an array of content parts, got number 5");
    fails([{ role: "user", content: [null] }], "messages[0].content[0] must be a content part object, got null");
    fails([{ role: "user", content: [{ type: "text" }] }], "messages[0].content[0].text must be a string, got undefined");
    fails([{ role: "user", content: [{ text: "x" }] }], "messages[0].content[0].type must be a string, got undefined");
    fails([{ role: "assistant", content: [{ type: "refusal", refusal: 1 }] }], "messages[0].content[0].refusal must be a string, got number 1");
  });

  test("messageContentText on its own (e.g. a completion's prompt parts)", () => {
    expect(messageContentText("x", "user")).toBe("x");
    expect(messageContentText([{ type: "text", text: "a" }], "user")).toBe("a");
    expect(() => messageContentText(7, "user", "prompt")).toThrow("prompt must be a string or an array of content parts");
  });
});
