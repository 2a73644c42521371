// A small JSON reader for config.json and safetensors headers (objects, arrays, strings,
// numbers, booleans, null). Throws std::runtime_error with the byte offset on malformed input.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ctxr {

struct JsonValue {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::map<std::string, JsonValue> object;

  bool is_null() const { return kind == Kind::Null; }
  bool is_number() const { return kind == Kind::Number; }
  bool is_string() const { return kind == Kind::String; }
  bool is_object() const { return kind == Kind::Object; }
  bool is_array() const { return kind == Kind::Array; }
  // The member `key` of an object, or null when absent (or when this is not an object).
  const JsonValue* find(const std::string& key) const;
};

JsonValue parse_json(const std::string& text);
std::string json_quote(const std::string& s);

}  // namespace ctxr
