#ifndef STRATA_TOOLS_JSON_WRITER_H_
#define STRATA_TOOLS_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace strata {

// Builds one JSON document in memory: objects, arrays, strings (escaped per
// RFC 8259), integers, doubles (non-finite ones become null) and booleans.
// Commas are inserted automatically. Not thread-safe.
//
// Example:
//   JsonWriter json;
//   json.BeginObject();
//   json.Key("table").String("users");
//   json.Key("dims").BeginArray().Int(8).Int(16).EndArray();
//   json.EndObject();
//   std::puts(json.text().c_str());  // {"table":"users","dims":[8,16]}
class JsonWriter {
 public:
  JsonWriter() = default;
  JsonWriter(const JsonWriter&) = delete;
  JsonWriter& operator=(const JsonWriter&) = delete;

  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // REQUIRES: inside an object, and the previous key has its value.
  JsonWriter& Key(absl::string_view key);
  JsonWriter& String(absl::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Uint(uint64_t value);
  // Shortest form that reads back as the same double.
  JsonWriter& Double(double value);
  // Shortest form that reads back as the same float.
  JsonWriter& Float(float value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();

  // The document so far.
  const std::string& text() const { return text_; }

 private:
  // Adds the comma that separates this value from the previous one.
  void BeforeValue();
  void AppendEscaped(absl::string_view value);

  std::string text_;
  // Per open container: whether it holds an element yet.
  std::vector<bool> has_element_;
  // True right after Key(): the next value needs no comma.
  bool after_key_ = false;
};

// Whether `text` is well-formed UTF-8 (no overlong forms or surrogates):
// what JSON strings and protobuf `string` fields may hold.
bool IsValidUtf8(absl::string_view text);

}  // namespace strata

#endif  // STRATA_TOOLS_JSON_WRITER_H_
