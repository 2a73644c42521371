// llama-oracle conversation: a multi-turn conversation through one llama-server slot's prompt cache
// (tools/server/server-context.cpp of the llama.cpp commit setup.sh checks out), to measure how many
// prompt tokens llama.cpp re-processes per turn. See conversation.cpp.
#pragma once
#include <string>
#include <vector>

// args: MODEL.gguf TURNS_FILE [options]; prints one JSON line, returns the exit code.
int conversation_mode(const std::vector<std::string>& args);
