#ifndef STRATA_WORKER_DATA_CRITEO_FORMAT_H_
#define STRATA_WORKER_DATA_CRITEO_FORMAT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace strata {

// The Criteo display-advertising text format: one example per line, 40
// tab-separated fields
//
//   label \t I1 .. I13 \t C1 .. C26
//
// label is 0 or 1; I1..I13 are integers (possibly empty or negative);
// C1..C26 are categorical values written as 8 hex digits (possibly empty).
// Lines may end in "\r\n" and may lack trailing fields (read as empty).
//
// Multi-hot extension: a categorical field may hold several values separated
// by ',' ("0a1b2c3d,00000012,0a1b2c3d"), at most kCriteoMaxValuesPerField;
// each value is a key of that field (a repeated value is a repeated key,
// which the model pools twice). Plain Criteo files are the one-value case.

inline constexpr int kCriteoNumDense = 13;
inline constexpr int kCriteoNumCategorical = 26;
inline constexpr int kCriteoNumFields =
    1 + kCriteoNumDense + kCriteoNumCategorical;
inline constexpr char kCriteoValueSeparator = ',';
inline constexpr int kCriteoMaxValuesPerField = 1024;

// Why a line was rejected.
enum class CriteoLineError {
  kNone = 0,
  kBadLabel,        // label missing or not exactly "0" or "1"
  kBadInteger,      // I1..I13 not an optional '-' and decimal digits
  kBadCategorical,  // C1..C26 not exactly 8 hex digits
  kTooManyFields,   // more than 40 tab-separated fields
  kTooManyValues,   // more than kCriteoMaxValuesPerField values in a field
};
inline constexpr int kNumCriteoLineErrors = 6;
const char* CriteoLineErrorName(CriteoLineError error);

// Feature key of categorical field `field` (0 for C1 .. 25 for C26) with the
// value whose hex text is `value`. Keys are distinct across fields and values
// (a bijective mix of (field, value)), stable across processes and releases.
uint64_t CriteoFeatureKey(int field, uint32_t value);

// Reserved key of an empty categorical field `field`; differs from every
// CriteoFeatureKey.
uint64_t CriteoMissingKey(int field);

// The usual transform of an integer feature: log(1 + max(x, 0)).
float CriteoDenseTransform(int64_t x);

// Strict field parsers: an optional '-' then 1..18 decimal digits; exactly 8
// hex digits (either case), one value of a categorical field. Return false
// on anything else.
bool ParseCriteoInteger(absl::string_view text, int64_t* value);
bool ParseCriteoHex(absl::string_view text, uint32_t* value);

// One parsed example.
struct CriteoExample {
  float label = 0;
  float dense[kCriteoNumDense] = {};  // transformed; empty -> 0
  // The keys of every categorical field in field order: C(f+1)'s are
  // keys[begin(f), ends[f]). One per field on single-hot lines (keys[f]);
  // an empty field has one, CriteoMissingKey(f).
  std::vector<uint64_t> keys;
  uint32_t ends[kCriteoNumCategorical] = {};

  uint32_t begin(int field) const { return field == 0 ? 0 : ends[field - 1]; }
};

// Parses `line` (without its '\n'; one trailing '\r' is ignored) into
// `example`. On a malformed line returns INVALID_ARGUMENT with a message
// naming the field and sets `*error` to the reason; `example` is then
// unspecified. `error` may be null.
absl::Status ParseCriteoLine(absl::string_view line, CriteoExample* example,
                             CriteoLineError* error);

}  // namespace strata

#endif  // STRATA_WORKER_DATA_CRITEO_FORMAT_H_
