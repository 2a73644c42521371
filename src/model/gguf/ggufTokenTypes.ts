/** `tokenizer.ggml.token_type` values (gguf-py's TokenType, llama.cpp's LLAMA_TOKEN_TYPE_*). */
export const TOKEN_TYPE = { normal: 1, unknown: 2, control: 3, userDefined: 4, unused: 5, byte: 6 } as const;
