#!/usr/bin/env python3
"""Checks that the documentation is self-contained.

Usage: check-doc-links.py REPO_ROOT

For README.md and every docs/**/*.md:
  - every Markdown link or image [text](target) that is not a URL resolves,
    relative to the page, to a file or folder inside the repository, and a
    #fragment on a .md target names one of that page's headings;
  - every plain-text mention of a docs/... .md page names an existing file;
  - no page cites a document kept outside the repository (../shared/...,
    DOMAIN.md, DESIGN.md, absolute paths).
Prints one line per problem and exits 1 if there is any.
"""
import os
import re
import sys

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
DOC_MENTION = re.compile(r"(?<![\w/.-])(docs/[\w./-]*\.md)")
OUTSIDE = re.compile(r"\.\./shared/|\bDOMAIN\.md\b|\bDESIGN\.md\b|(?<![\w.])/work/")
FENCE = re.compile(r"^\s*(```|~~~)")


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        found = set()
        counts = {}
        in_fence = False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if FENCE.match(line):
                    in_fence = not in_fence
                    continue
                m = None if in_fence else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m:
                    base = slug(m.group(1))
                    n = counts.get(base, 0)
                    counts[base] = n + 1
                    found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def pages(root):
    yield os.path.join(root, "README.md")
    for dirpath, _, files in os.walk(os.path.join(root, "docs")):
        for name in sorted(files):
            if name.endswith(".md"):
                yield os.path.join(dirpath, name)


def check(root):
    root = os.path.realpath(root)
    problems = []
    for page in pages(root):
        rel = os.path.relpath(page, root)
        with open(page, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for n, line in enumerate(lines, 1):
            where = f"{rel}:{n}"
            if OUTSIDE.search(line):
                problems.append(f"{where}: cites a document outside the repository: {line.strip()}")
            for target in LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):
                    continue  # http:, https:, mailto:
                path, _, frag = target.partition("#")
                dest = page if not path else os.path.realpath(
                    os.path.join(os.path.dirname(page), path))
                if dest != root and not dest.startswith(root + os.sep):
                    problems.append(f"{where}: link leaves the repository: {target}")
                elif not os.path.exists(dest):
                    problems.append(f"{where}: link to a missing file: {target}")
                elif frag and dest.endswith(".md") and frag not in anchors(dest):
                    problems.append(f"{where}: no heading #{frag} in {os.path.relpath(dest, root)}")
            for mention in DOC_MENTION.findall(line):
                if not os.path.exists(os.path.join(root, mention)):
                    problems.append(f"{where}: names a missing page: {mention}")
    return problems


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s)")
        return 1
    print("doc links: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
