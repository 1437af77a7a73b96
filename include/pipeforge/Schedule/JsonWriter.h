//===- JsonWriter.h - Streamed JSON in nlohmann's dump layout ---*- C++ -*-===//
//
// Writes JSON to a stream as it is formed, byte for byte as
// nlohmann::ordered_json::dump(indent) would print the same document
// (indent >= 0: one member per line, "key": value; indent < 0: compact).
// For the schedule formats of millions of actions (exportJson): no document
// is built. Plain C++; numbers and escaped strings go through nlohmann's
// serializer so that they match exactly.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SCHEDULE_JSONWRITER_H
#define PIPEFORGE_SCHEDULE_JSONWRITER_H

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace pipeforge::sched {

class JsonWriter {
public:
  JsonWriter(std::ostream &os, int indent);
  ~JsonWriter(); ///< flushes
  JsonWriter(const JsonWriter &) = delete;
  JsonWriter &operator=(const JsonWriter &) = delete;

  /// Containers. In an object, each value is preceded by key().
  void beginObject();
  void endObject();
  void beginArray();
  void endArray();
  /// An object member's key: a plain name (no characters to escape).
  void key(const char *k);
  /// key(k) then value(v): one member.
  template <typename T> void field(const char *k, const T &v) {
    key(k);
    value(v);
  }

  void value(int64_t v);
  void value(int32_t v) { value(int64_t(v)); }
  void value(uint64_t v);
  void value(double v);
  void value(bool v);
  /// A string (escaped as nlohmann escapes it).
  void value(const std::string &s);
  void value(const char *s) { value(std::string(s)); }
  /// A string known to need no escaping (op names, payloads).
  void plainString(const char *s);

  /// Writes what is buffered to the stream.
  void flush();

private:
  void element(); ///< separator and indentation before a member or element
  void put(const char *s, size_t n) { buf.append(s, n); maybeFlush(); }
  void put(const std::string &s) { put(s.data(), s.size()); }
  void maybeFlush() {
    if (buf.size() >= (1u << 20))
      flush();
  }
  void newline(size_t level);

  std::ostream &os;
  int indent;
  std::string buf;
  std::vector<int64_t> counts; ///< members written per open container
  bool afterKey = false;
};

} // namespace pipeforge::sched

#endif // PIPEFORGE_SCHEDULE_JSONWRITER_H
