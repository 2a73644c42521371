#include "json.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace ctxr {

const JsonValue* JsonValue::find(const std::string& key) const {
  if (kind != Kind::Object) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &it->second;
}

namespace {

struct Parser {
  const std::string& s;
  size_t i = 0;
  int depth = 0;

  [[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error("invalid JSON at byte " + std::to_string(i) + ": " + what);
  }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
  }
  bool literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s.compare(i, n, word) != 0) return false;
    i += n;
    return true;
  }
  static void put_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  unsigned hex4() {
    if (i + 4 > s.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
      char c = s[i++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else fail("bad \\u escape");
    }
    return v;
  }
  std::string str() {
    if (s[i] != '"') fail("expected a string");
    i++;
    std::string out;
    while (true) {
      if (i >= s.size()) fail("unterminated string");
      char c = s[i++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i >= s.size()) fail("unterminated escape");
      char e = s[i++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && i + 1 < s.size() && s[i] == '\\' && s[i + 1] == 'u') {
            i += 2;
            unsigned low = hex4();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          put_utf8(out, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
  }
  JsonValue value() {
    if (++depth > 200) fail("nested too deeply");
    ws();
    if (i >= s.size()) fail("unexpected end");
    JsonValue v;
    char c = s[i];
    if (c == '{') {
      v.kind = JsonValue::Kind::Object;
      i++;
      ws();
      if (i < s.size() && s[i] == '}') {
        i++;
      } else {
        while (true) {
          ws();
          if (i >= s.size()) fail("unterminated object");
          std::string key = str();
          ws();
          if (i >= s.size() || s[i] != ':') fail("expected ':'");
          i++;
          v.object[key] = value();
          ws();
          if (i < s.size() && s[i] == ',') { i++; continue; }
          if (i < s.size() && s[i] == '}') { i++; break; }
          fail("expected ',' or '}'");
        }
      }
    } else if (c == '[') {
      v.kind = JsonValue::Kind::Array;
      i++;
      ws();
      if (i < s.size() && s[i] == ']') {
        i++;
      } else {
        while (true) {
          v.array.push_back(value());
          ws();
          if (i < s.size() && s[i] == ',') { i++; continue; }
          if (i < s.size() && s[i] == ']') { i++; break; }
          fail("expected ',' or ']'");
        }
      }
    } else if (c == '"') {
      v.kind = JsonValue::Kind::String;
      v.string = str();
    } else if (literal("true")) {
      v.kind = JsonValue::Kind::Bool;
      v.boolean = true;
    } else if (literal("false")) {
      v.kind = JsonValue::Kind::Bool;
    } else if (literal("null")) {
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      const char* start = s.c_str() + i;
      char* end = nullptr;
      v.kind = JsonValue::Kind::Number;
      v.number = std::strtod(start, &end);
      if (end == start) fail("bad number");
      i += static_cast<size_t>(end - start);
    } else {
      fail(std::string("unexpected character '") + c + "'");
    }
    depth--;
    return v;
  }
};

}  // namespace

JsonValue parse_json(const std::string& text) {
  Parser p{text};
  JsonValue v = p.value();
  p.ws();
  if (p.i != text.size()) p.fail("trailing characters");
  return v;
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace ctxr
