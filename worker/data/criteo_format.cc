#include "worker/data/criteo_format.h"

#include <array>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace strata {
namespace {

// Keys mix (field + 1) << 33 | value: values use 32 bits and 2^32 marks the
// missing value, so no two (field, value) pairs share an input, and Mix64 is a
// bijection, so none share a key.
constexpr uint64_t kMissingValue = uint64_t{1} << 32;
constexpr uint64_t kKeySalt = 0x43524954454F4B59ull;  // "CRITEOKY"

uint64_t KeyOf(int field, uint64_t value) {
  return Mix64(((static_cast<uint64_t>(field) + 1) << 33 | value) ^ kKeySalt);
}

// The value of each byte as a hex digit, or kNotHex. A table rather than
// range tests: digits and letters come in random order, and the tests'
// branches mispredicted on every few characters of a training file.
constexpr uint8_t kNotHex = 0xFF;
constexpr std::array<uint8_t, 256> kHexDigits = [] {
  std::array<uint8_t, 256> digits{};
  for (int c = 0; c < 256; ++c) {
    digits[c] = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : kNotHex;
  }
  return digits;
}();

// Shows a field's text in an error message, shortened if long.
std::string Quote(absl::string_view text) {
  if (text.size() > 40) return absl::StrCat("'", text.substr(0, 40), "...'");
  return absl::StrCat("'", text, "'");
}

absl::Status Malformed(CriteoLineError kind, CriteoLineError* error,
                       const std::string& message) {
  if (error != nullptr) *error = kind;
  return absl::InvalidArgumentError(message);
}

}  // namespace

const char* CriteoLineErrorName(CriteoLineError error) {
  switch (error) {
    case CriteoLineError::kNone:
      return "none";
    case CriteoLineError::kBadLabel:
      return "bad_label";
    case CriteoLineError::kBadInteger:
      return "bad_integer";
    case CriteoLineError::kBadCategorical:
      return "bad_categorical";
    case CriteoLineError::kTooManyValues:
      return "too_many_values";
    case CriteoLineError::kTooManyFields:
      return "too_many_fields";
  }
  return "unknown";
}

uint64_t CriteoFeatureKey(int field, uint32_t value) {
  return KeyOf(field, value);
}

uint64_t CriteoMissingKey(int field) { return KeyOf(field, kMissingValue); }

namespace {

float ComputeDenseTransform(int64_t x) {
  return static_cast<float>(std::log1p(static_cast<double>(x > 0 ? x : 0)));
}

// Counts below this are transformed by table: most of a file's integers
// are small, and log1p of each was 2% of a training worker's CPU.
constexpr int64_t kTransformTableSize = 1024;

const std::array<float, kTransformTableSize>& DenseTransformTable() {
  static const std::array<float, kTransformTableSize> table = [] {
    std::array<float, kTransformTableSize> values;
    for (int64_t x = 0; x < kTransformTableSize; ++x) {
      values[x] = ComputeDenseTransform(x);
    }
    return values;
  }();
  return table;
}

}  // namespace

float CriteoDenseTransform(int64_t x) {
  if (x <= 0) return 0.0f;
  if (x < kTransformTableSize) return DenseTransformTable()[x];
  return ComputeDenseTransform(x);
}

bool ParseCriteoInteger(absl::string_view text, int64_t* value) {
  bool negative = false;
  if (!text.empty() && text[0] == '-') {
    negative = true;
    text.remove_prefix(1);
  }
  // 18 digits always fit in an int64_t.
  if (text.empty() || text.size() > 18) return false;
  int64_t result = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    result = result * 10 + (c - '0');
  }
  *value = negative ? -result : result;
  return true;
}

bool ParseCriteoHex(absl::string_view text, uint32_t* value) {
  if (text.size() != 8) return false;
  uint32_t result = 0;
  uint8_t seen = 0;  // The digits ORed: kNotHex's high bits if any was not.
  for (char c : text) {
    const uint8_t digit = kHexDigits[static_cast<uint8_t>(c)];
    seen |= digit;
    result = result << 4 | digit;
  }
  if (seen > 0xF) return false;
  *value = result;
  return true;
}

namespace {

// Appends the keys of categorical field `c` (0-based) whose text is `text`.
absl::Status ParseCategorical(int c, absl::string_view text,
                              CriteoExample* example, CriteoLineError* error) {
  uint32_t value = 0;
  if (text.empty()) {
    example->keys.push_back(CriteoMissingKey(c));
  } else if (text.size() == 8 && ParseCriteoHex(text, &value)) {
    example->keys.push_back(CriteoFeatureKey(c, value));  // one value
  } else {
    const size_t first = example->keys.size();
    for (absl::string_view value_text :
         absl::StrSplit(text, kCriteoValueSeparator)) {
      if (!ParseCriteoHex(value_text, &value)) {
        return Malformed(CriteoLineError::kBadCategorical, error,
                         absl::StrCat("C", c + 1, " ", Quote(value_text),
                                      " is not 8 hex digits"));
      }
      if (example->keys.size() - first == kCriteoMaxValuesPerField) {
        return Malformed(CriteoLineError::kTooManyValues, error,
                         absl::StrCat("C", c + 1, " has more than ",
                                      kCriteoMaxValuesPerField, " values"));
      }
      example->keys.push_back(CriteoFeatureKey(c, value));
    }
  }
  example->ends[c] = static_cast<uint32_t>(example->keys.size());
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseCriteoLine(absl::string_view line, CriteoExample* example,
                             CriteoLineError* error) {
  if (error != nullptr) *error = CriteoLineError::kNone;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  example->keys.clear();
  int field = 0;
  size_t start = 0;
  // One pass over the fields; positions past the last field stay empty.
  while (true) {
    const size_t tab = line.find('\t', start);
    const absl::string_view text = line.substr(
        start,
        tab == absl::string_view::npos ? absl::string_view::npos : tab - start);
    if (field >= kCriteoNumFields) {
      return Malformed(CriteoLineError::kTooManyFields, error,
                       absl::StrCat("more than ", kCriteoNumFields, " fields"));
    }
    if (field == 0) {
      if (text != "0" && text != "1") {
        return Malformed(CriteoLineError::kBadLabel, error,
                         absl::StrCat("label ", Quote(text), " is not 0 or 1"));
      }
      example->label = text[0] == '1' ? 1.0f : 0.0f;
    } else if (field <= kCriteoNumDense) {
      int64_t value = 0;
      if (!text.empty() && !ParseCriteoInteger(text, &value)) {
        return Malformed(
            CriteoLineError::kBadInteger, error,
            absl::StrCat("I", field, " ", Quote(text), " is not an integer"));
      }
      example->dense[field - 1] = CriteoDenseTransform(value);
    } else {
      const int c = field - 1 - kCriteoNumDense;
      STRATA_RETURN_IF_ERROR(ParseCategorical(c, text, example, error));
    }
    ++field;
    if (tab == absl::string_view::npos) break;
    start = tab + 1;
  }
  // Missing trailing fields read as empty.
  for (; field < kCriteoNumFields; ++field) {
    if (field <= kCriteoNumDense) {
      example->dense[field - 1] = 0.0f;
    } else {
      const int c = field - 1 - kCriteoNumDense;
      example->keys.push_back(CriteoMissingKey(c));
      example->ends[c] = static_cast<uint32_t>(example->keys.size());
    }
  }
  return absl::OkStatus();
}

}  // namespace strata
