#!/usr/bin/env python3
"""Checks what may include what (docs/architecture.md, "What may depend on
what").

Usage: check-layering.py REPO_ROOT

Three parts of the tree, each with the closure of its #includes (quoted and
angled, followed through the project's own headers; conditional inclusion
is not evaluated, so every include counts):

  contract   contract/ and the schedule core it archives (lib/Schedule's
             PIPEFORGE_SCHEDULE_CORE_SOURCES). It reaches only its own
             headers, include/pipeforge/Support, the schedule core's headers
             and system headers: no dialect, no other compiler header, no
             runtime header, no MLIR or LLVM.
  compiler   lib/ and include/pipeforge/ (the dialects, the passes, the
             importer, the lowering, the plain libraries). It reaches no
             runtime/ header: the rt/ headers it may include are the
             contract's (contract/include/pipeforge/rt/).
  runtime    runtime/. It reaches no compiler header (include/pipeforge/
             other than Support and the schedule core's headers, lib/) and
             no MLIR or LLVM.

The schedule core's headers are the include/pipeforge/Schedule headers the
core's sources reach. Prints one line per problem and exits 1 if there is
any, else prints "layering: ok".
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SOURCES = (".h", ".hpp", ".cpp", ".cu", ".cuh", ".inc")
COMPILER_DIRS = ("Dialect", "Import", "Pipelines", "Target", "Partition", "Plan")
COMPILER_SPELLED = re.compile(r"^(pipeforge/(%s)/|mlir/|llvm/)" % "|".join(COMPILER_DIRS))
MLIR_LLVM = re.compile(r"^(mlir|llvm)/")


class Tree:
    def __init__(self, root):
        self.root = os.path.realpath(root)
        # Where a quoted include is looked for after the including file's
        # folder (the targets' include directories).
        self.roots = [self.path(p) for p in ("include", "contract/include",
                                             "runtime/include", "runtime/backends")]
        self.edges = {}

    def path(self, rel):
        return os.path.join(self.root, rel)

    def rel(self, path):
        return os.path.relpath(path, self.root)

    def files(self, *rels):
        for rel in rels:
            top = self.path(rel)
            if os.path.isfile(top):
                yield top
                continue
            for dirpath, _, names in os.walk(top):
                for name in sorted(names):
                    if name.endswith(SOURCES):
                        yield os.path.join(dirpath, name)

    def includes(self, f):
        """(line, spelled, resolved path or None) of each #include of f."""
        if f not in self.edges:
            out = []
            with open(f, encoding="utf-8", errors="replace") as fh:
                for n, line in enumerate(fh, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    spelled = m.group(2)
                    dirs = ([os.path.dirname(f)] if m.group(1) == '"' else []) + self.roots
                    found = None
                    for d in dirs:
                        cand = os.path.normpath(os.path.join(d, spelled))
                        if os.path.isfile(cand):
                            found = cand
                            break
                    out.append((n, spelled, found))
            self.edges[f] = out
        return self.edges[f]

    def closure(self, seeds):
        """Every file reached from `seeds`, with the seed that reached it."""
        seen = {}
        stack = [(s, s) for s in seeds]
        while stack:
            f, seed = stack.pop()
            if f in seen:
                continue
            seen[f] = seed
            for _, _, dest in self.includes(f):
                if dest and dest.startswith(self.root + os.sep) and dest not in seen:
                    stack.append((dest, seed))
        return seen


def core_sources(tree):
    cml = tree.path("lib/Schedule/CMakeLists.txt")
    if not os.path.isfile(cml):
        return []
    m = re.search(r"set\(PIPEFORGE_SCHEDULE_CORE_SOURCES\s+([^)]*)\)", open(cml).read())
    names = m.group(1).split() if m else []
    return [tree.path("lib/Schedule/" + n) for n in names]


def under(tree, path, *rels):
    return any(path == tree.path(r) or path.startswith(tree.path(r) + os.sep) for r in rels)


def check(root):
    tree = Tree(root)
    problems = []

    def report(group, seed, f, line, spelled, why):
        via = "" if seed == f else f" (reached from {tree.rel(seed)})"
        problems.append(f"{group}: {tree.rel(f)}:{line}: includes {spelled}: {why}{via}")

    core = core_sources(tree)
    core_headers = {f for f in tree.closure(core)
                    if under(tree, f, "include/pipeforge/Schedule")}
    contract_seeds = list(tree.files("contract")) + core

    for f, seed in sorted(tree.closure(contract_seeds).items()):
        for line, spelled, dest in tree.includes(f):
            if MLIR_LLVM.match(spelled):
                report("contract", seed, f, line, spelled, "MLIR or LLVM")
            elif dest is None:
                if COMPILER_SPELLED.match(spelled):
                    report("contract", seed, f, line, spelled, "a compiler header")
            elif under(tree, dest, "runtime"):
                report("contract", seed, f, line, spelled,
                       "a runtime header outside the contract")
            elif under(tree, dest, "lib/Dialect", "include/pipeforge/Dialect"):
                report("contract", seed, f, line, spelled, "a dialect header")
            elif under(tree, dest, "include/pipeforge/Schedule") and dest not in core_headers:
                report("contract", seed, f, line, spelled,
                       "a schedule header outside the core")
            elif (under(tree, dest, "lib") and not under(tree, dest, "lib/Schedule")) or any(
                    under(tree, dest, "include/pipeforge/" + d) for d in COMPILER_DIRS):
                report("contract", seed, f, line, spelled, "a compiler header")

    for f, seed in sorted(tree.closure(list(tree.files("lib", "include/pipeforge"))).items()):
        for line, spelled, dest in tree.includes(f):
            if dest and under(tree, dest, "runtime"):
                report("compiler", seed, f, line, spelled,
                       "a runtime header outside the contract")

    for f, seed in sorted(tree.closure(list(tree.files("runtime"))).items()):
        for line, spelled, dest in tree.includes(f):
            if COMPILER_SPELLED.match(spelled):
                report("runtime", seed, f, line, spelled,
                       "MLIR or LLVM" if MLIR_LLVM.match(spelled) else "a compiler header")
            elif dest is None:
                continue
            elif under(tree, dest, "lib") or (
                    under(tree, dest, "include/pipeforge")
                    and not under(tree, dest, "include/pipeforge/Support")
                    and dest not in core_headers):
                report("runtime", seed, f, line, spelled, "a compiler header")
    return sorted(set(problems))


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s)")
        return 1
    print("layering: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
