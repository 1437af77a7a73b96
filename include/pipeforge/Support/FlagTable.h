//===- FlagTable.h - A tool's flags as one table, without LLVM --*- C++ -*-===//
//
// The command line of the tools that link no LLVM (pipeforge-run and the
// compiled executables, pipeforge-export, pipeforge-tokenize,
// pipeforge-sched): one table of
// Flag<Options>, in the order the usage text shows them, each with its name,
// what it takes (nothing, an integer or a number in a closed range, one of a
// few words, any text, or a Setter for anything else), where its value goes
// and where it stands in the usage text. parseFlags reads argv through the
// table, a value as the next argument or after '=' (--flag value,
// --flag=value; a value out of its range or not among its words is an error
// naming the flag, as the flag is read); synopsis and optionList write the usage
// text from it; exitWithUsage ends a command line that does not parse the
// one way: "TOOL: MESSAGE", the usage, exit 2 (a usage error; 1 is a run
// that failed). Header-only and plain C++, so the runtime may use it; the
// MLIR tools parse with llvm::cl instead (ToolHelp.h).
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_SUPPORT_FLAGTABLE_H
#define PIPEFORGE_SUPPORT_FLAGTABLE_H

#include "pipeforge/Support/Numeric.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <variant>

namespace pipeforge::flags {

/// A flag whose value needs more than a range or a list of words: returns
/// why the value is wrong, or nullopt after storing it.
template <class O>
using Setter = std::optional<std::string> (*)(O &, const std::string &value);

/// Where a flag's value goes: a switch (set to true), an integer (int or
/// int64_t), a number, text (any, or one of the words of Flag::words), or a
/// Setter.
template <class O>
using Field = std::variant<bool O::*, int O::*, int64_t O::*, double O::*,
                           std::string O::*, Setter<O>>;

/// Where a flag stands in the synopsis of the usage text.
enum class Place {
  Line,   ///< begins a line: [--flag VALUE]
  Next,   ///< after the previous flag on its line
  Inside, ///< within the previous flag's brackets: [--a X [--b]]
  Hidden, ///< not shown (-h, --help)
};

template <class O> struct Flag {
  const char *name;
  /// The value in the usage text (nullptr: a switch). For a text flag with
  /// `words`, the only values it takes, separated by '|'.
  const char *value;
  Place place;
  Field<O> field;
  /// The closed range of an integer or a number (of an int: within int's).
  double lo = 0, hi = 0;
  bool words = false;
  /// What the flag does, for the option list (optionList); lines separated
  /// by '\n'. nullptr: not listed.
  const char *help = nullptr;
};

namespace detail {

/// "a|b|c" as "a, b or c".
inline std::string wordList(const std::string &words) {
  std::string out;
  size_t at = 0;
  while (true) {
    size_t bar = words.find('|', at);
    std::string w = words.substr(at, bar == std::string::npos ? bar : bar - at);
    if (!out.empty())
      out += bar == std::string::npos ? " or " : ", ";
    out += w;
    if (bar == std::string::npos)
      return out;
    at = bar + 1;
  }
}

inline bool isOneOf(const std::string &v, const std::string &words) {
  return ("|" + words + "|").find("|" + v + "|") != std::string::npos;
}

/// Stores `v`, the value of the flag `f`, or says why it is wrong.
template <class O>
std::optional<std::string> setValue(const Flag<O> &f, const std::string &v,
                                    O &o) {
  const std::string name = f.name;
  if (auto *n = std::get_if<int64_t O::*>(&f.field))
    return parseIntOption(name, v, int64_t(f.lo), int64_t(f.hi), o.**n);
  if (auto *n = std::get_if<int O::*>(&f.field)) {
    int64_t wide = 0;
    auto err = parseIntOption(name, v, int64_t(f.lo), int64_t(f.hi), wide);
    if (!err)
      o.**n = int(wide);
    return err;
  }
  if (auto *x = std::get_if<double O::*>(&f.field))
    return parseNumberOption(name, v, {f.lo, f.hi}, o.**x);
  if (auto *set = std::get_if<Setter<O>>(&f.field))
    return (*set)(o, v);
  if (f.words && !isOneOf(v, f.value))
    return name + " must be " + wordList(f.value);
  o.*std::get<std::string O::*>(f.field) = v;
  return std::nullopt;
}

/// Reads the flag `f` at argv[i]: its value is `attached` (what followed
/// '=' in the argument) or argv[i + 1].
template <class O>
std::optional<std::string> readFlag(const Flag<O> &f, int argc, char **argv,
                                    int &i,
                                    const std::optional<std::string> &attached,
                                    O &o) {
  if (auto *on = std::get_if<bool O::*>(&f.field)) {
    o.**on = true;
    return std::nullopt;
  }
  if (attached)
    return setValue(f, *attached, o);
  if (i + 1 >= argc)
    return "option " + std::string(f.name) + " needs a value";
  return setValue(f, argv[++i], o);
}

/// The flag of `table` that `arg` names: the flag itself, or a flag that
/// takes a value and its value after '=' (--flag=value; not a switch, not
/// a name without the leading "--"). nullptr: none.
template <class O, size_t N>
const Flag<O> *findFlag(const Flag<O> (&table)[N], const std::string &arg,
                        std::optional<std::string> &attached) {
  auto named = [&](const std::string &name) -> const Flag<O> * {
    const Flag<O> *f =
        std::find_if(table, table + N,
                     [&](const Flag<O> &g) { return name == g.name; });
    return f == table + N ? nullptr : f;
  };
  if (const Flag<O> *f = named(arg))
    return f;
  size_t eq = arg.rfind("--", 0) == 0 ? arg.find('=') : std::string::npos;
  if (eq == std::string::npos)
    return nullptr;
  const Flag<O> *f = named(arg.substr(0, eq));
  if (!f || std::holds_alternative<bool O::*>(f->field))
    return nullptr;
  attached = arg.substr(eq + 1);
  return f;
}

/// "[--flag VALUE" (the closing bracket is the caller's).
template <class O> std::string opened(const Flag<O> &f) {
  return std::string("[") + f.name + (f.value ? " " : "") +
         (f.value ? f.value : "");
}

} // namespace detail

/// Reads argv[1..argc) into `o`: each flag of `table` as its entry says
/// (--flag value or --flag=value), every other argument through `positional` (a callable taking the
/// argument, returning why it is wrong or nullopt), except one that begins
/// with '-': "unknown option 'ARG'". Stops at the first error, which it
/// returns, and after a flag that sets `stop` (-h / --help) when given.
template <class O, size_t N, class Positional>
std::optional<std::string> parseFlags(const Flag<O> (&table)[N], int argc,
                                      char **argv, O &o,
                                      Positional &&positional,
                                      bool O::*stop = nullptr) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::optional<std::string> attached;
    const Flag<O> *f = detail::findFlag(table, arg, attached);
    std::optional<std::string> err;
    if (f)
      err = detail::readFlag(*f, argc, argv, i, attached, o);
    else if (!arg.empty() && arg[0] == '-')
      err = "unknown option '" + arg + "'";
    else
      err = positional(arg);
    if (err || (stop && o.*stop))
      return err;
  }
  return std::nullopt;
}

/// The flags as a synopsis: " [--flag VALUE]" each, `lineBreak` (a newline
/// and an indent) instead of the space before a Place::Line flag, a
/// Place::Inside flag within the brackets of the flag before it, no
/// Place::Hidden flag.
template <class O, size_t N>
std::string synopsis(const Flag<O> (&table)[N], const std::string &lineBreak) {
  std::string text;
  for (size_t i = 0; i < N; ++i) {
    const Flag<O> &f = table[i];
    if (f.place == Place::Hidden || f.place == Place::Inside)
      continue;
    text += f.place == Place::Line ? lineBreak : " ";
    text += detail::opened(f);
    for (size_t j = i + 1; j < N && table[j].place == Place::Inside; ++j)
      text += " " + detail::opened(table[j]) + "]";
    text += "]";
  }
  return text;
}

/// The flags that have a `help`, one per line: "  --flag VALUE  help", the
/// help in one column (its further lines too), each line ending in '\n'.
template <class O, size_t N>
std::string optionList(const Flag<O> (&table)[N]) {
  auto head = [](const Flag<O> &f) {
    return std::string("  ") + f.name + (f.value ? " " : "") +
           (f.value ? f.value : "");
  };
  size_t column = 0;
  for (const Flag<O> &f : table)
    if (f.help)
      column = std::max(column, head(f).size() + 2);
  std::string text;
  for (const Flag<O> &f : table) {
    if (!f.help)
      continue;
    std::string line = head(f);
    std::string help = f.help;
    size_t at = 0;
    while (true) {
      size_t nl = help.find('\n', at);
      line.resize(column, ' ');
      line += help.substr(at, nl == std::string::npos ? nl : nl - at);
      text += line + "\n";
      if (nl == std::string::npos)
        break;
      line.clear();
      at = nl + 1;
    }
  }
  return text;
}

/// Ends a command line: with a message, "TOOL: MESSAGE" and `usage` on
/// stderr, exit 2 (a usage error); without, `usage` on stdout, exit 0
/// (--help).
[[noreturn]] inline void exitWithUsage(const char *tool,
                                       const std::optional<std::string> &message,
                                       const std::string &usage) {
  if (message)
    std::fprintf(stderr, "%s: %s\n", tool, message->c_str());
  std::fputs(usage.c_str(), message ? stderr : stdout);
  std::exit(message ? 2 : 0);
}

} // namespace pipeforge::flags

#endif // PIPEFORGE_SUPPORT_FLAGTABLE_H
