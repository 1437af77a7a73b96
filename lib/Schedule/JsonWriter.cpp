//===- JsonWriter.cpp - Streamed JSON in nlohmann's dump layout -----------===//

#include "pipeforge/Schedule/JsonWriter.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <ostream>

namespace pipeforge::sched {

JsonWriter::JsonWriter(std::ostream &os, int indent) : os(os), indent(indent) {
  buf.reserve(1u << 20 | 4096);
}

JsonWriter::~JsonWriter() { flush(); }

void JsonWriter::flush() {
  if (!buf.empty())
    os.write(buf.data(), std::streamsize(buf.size()));
  buf.clear();
}

void JsonWriter::newline(size_t level) {
  if (indent < 0)
    return;
  buf.push_back('\n');
  buf.append(level * size_t(indent), ' ');
}

void JsonWriter::element() {
  if (afterKey) {
    afterKey = false;
    return;
  }
  if (counts.empty())
    return;
  if (counts.back()++ > 0)
    buf.push_back(',');
  newline(counts.size());
}

void JsonWriter::key(const char *k) {
  element();
  buf.push_back('"');
  buf.append(k);
  buf.append(indent < 0 ? "\":" : "\": ");
  afterKey = true;
}

void JsonWriter::beginObject() {
  element();
  buf.push_back('{');
  counts.push_back(0);
}

void JsonWriter::endObject() {
  bool any = counts.back() > 0;
  counts.pop_back();
  if (any)
    newline(counts.size());
  buf.push_back('}');
  maybeFlush();
}

void JsonWriter::beginArray() {
  element();
  buf.push_back('[');
  counts.push_back(0);
}

void JsonWriter::endArray() {
  bool any = counts.back() > 0;
  counts.pop_back();
  if (any)
    newline(counts.size());
  buf.push_back(']');
  maybeFlush();
}

void JsonWriter::value(int64_t v) {
  element();
  char tmp[24];
  auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
  put(tmp, size_t(r.ptr - tmp));
}

void JsonWriter::value(uint64_t v) {
  element();
  char tmp[24];
  auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
  put(tmp, size_t(r.ptr - tmp));
}

void JsonWriter::value(double v) {
  element();
  put(nlohmann::ordered_json(v).dump());
}

void JsonWriter::value(bool v) {
  element();
  put(v ? "true" : "false", v ? 4 : 5);
}

void JsonWriter::value(const std::string &s) {
  element();
  put(nlohmann::ordered_json(s).dump());
}

void JsonWriter::plainString(const char *s) {
  element();
  buf.push_back('"');
  buf.append(s);
  buf.push_back('"');
  maybeFlush();
}

} // namespace pipeforge::sched
