#!/usr/bin/env python3
"""Runs every shell command of the documentation, as written.

Usage: doc-commands.py --repo REPO --build BUILD --tools BIN --out DIR
                       [--gpu] [--transformers PYTHON] [--list] [PAGE...]

Every fenced block of README.md and docs/**/*.md must name its kind in the
fence's info string (an unlabelled block is an error, so a command cannot be
added without deciding whether it runs):

  ```sh            commands: run as one bash script (errexit, pipefail) in
                   the page's scratch folder; it must exit 0
  ```sh fails      commands that must each fail with a clear error: every
                   command (a line, with its backslash continuations) runs
                   on its own and must exit with a status in 1..127 (not a
                   signal, not the shell's 'command not found')
  ```sh gpu        commands that need an NVIDIA GPU: run only with --gpu
  ```sh transformers  commands that need Hugging Face's transformers (the
                   walk of docs/huggingface.md): run only with
                   --transformers PYTHON, whose folder comes first on PATH
                   (so `python3` is that interpreter)
  ```sh manual     not run here; the page says why (the test suite itself,
                   several hosts, an hours-long fuzz run). The summary names
                   each one, and test/Docs/commands.test lists them all
  ```text output   the expected output (stdout and stderr) of the sh block
                   just before it: compared line by line after trailing
                   spaces are stripped; a line '...' matches any number of
                   lines, and '...' inside a line matches any text
  any other label  (text, mlir, json, c++, ...) is not run

Each page runs in its own scratch folder, DIR/<page>, whose entries are
links to the repository's top-level files and folders (examples/, scripts/,
...) and build/ (a link to BUILD), so relative paths work as they do in a
checkout; what a command writes stays in the scratch folder. The tools are
first on PATH. Blocks of a page run in order, so a page's first block can
create the inputs the later ones use. Prints one line per block and a
summary; exits 1 if any block fails.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import time

FENCE = re.compile(r"^(\s*)(```|~~~)\s*(.*?)\s*$")
HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
RUN_KINDS = {"sh", "sh fails", "sh gpu", "sh manual", "sh transformers"}
TIMEOUT_S = 600


class Block:
    def __init__(self, page, line, info, body):
        self.page, self.line, self.info, self.body = page, line, info, body
        self.expected = None  # the following 'text output' block's lines

    def where(self):
        return f"{self.page}:{self.line}"


def parse(repo, page):
    """The page's fenced blocks, with unlabelled fences reported as errors."""
    path = os.path.join(repo, page)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, errors = [], []
    previous = None  # the label of the fence before this one
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.groups()
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*" + re.escape(fence) + r"\s*$", lines[j]):
            j += 1
        if j == len(lines):
            errors.append(f"{page}:{i + 1}: fence never closed")
            break
        body = [l[len(indent):] if l.startswith(indent) else l.lstrip() for l in lines[i + 1:j]]
        info = " ".join(info.split())
        if not info:
            errors.append(f"{page}:{i + 1}: fenced block without a label: say what it is "
                          "(sh to run it, text output for the output of the sh block "
                          "before it, text, mlir, json, ...)")
        elif info.startswith("sh") and info not in RUN_KINDS:
            errors.append(f"{page}:{i + 1}: unknown block kind '{info}' (expected one of "
                          + ", ".join(sorted(RUN_KINDS)) + ")")
        elif info == "text output":
            if previous not in RUN_KINDS:
                errors.append(f"{page}:{i + 1}: a 'text output' block must follow an sh block")
            else:
                blocks[-1].expected = body
        else:
            blocks.append(Block(page, i + 1, info, body))
        previous = info
        i = j + 1
    return blocks, errors


def commands(body):
    """The block's commands: lines joined at backslash continuations,
    without blank lines and comments."""
    out, cur, heredoc = [], "", None
    for line in body:
        if heredoc is not None:
            out[-1] += "\n" + line
            if line.strip() == heredoc:
                heredoc = None
            continue
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        m = HEREDOC.search(line)
        if m and not line.rstrip().endswith("\\"):
            out.append(cur + line)
            cur, heredoc = "", m.group(1)
            continue
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    if cur:
        out.append(cur)
    return out


def matches(expected, actual):
    """Line-by-line match with '...' wildcards; returns None or a message."""
    exp = [l.rstrip() for l in expected]
    act = [l.rstrip() for l in actual]
    while act and not act[-1]:
        act.pop()
    while exp and not exp[-1]:
        exp.pop()

    def line_ok(e, a):
        if "..." not in e:
            return e == a
        parts = [re.escape(p) for p in e.split("...")]
        return re.fullmatch(".*".join(parts), a, re.S) is not None

    # Backtracking over '...' lines; the blocks are short.
    def go(i, j):
        if i == len(exp):
            return j == len(act)
        if exp[i] == "...":
            return any(go(i + 1, k) for k in range(j, len(act) + 1))
        return j < len(act) and line_ok(exp[i], act[j]) and go(i + 1, j + 1)

    if go(0, 0):
        return None
    # Say where the first plain mismatch is, for the reader.
    j = 0
    for i, e in enumerate(exp):
        if e == "...":
            return "the output differs after a '...' line"
        if j >= len(act):
            return f"expected line {i + 1} '{e}' but the output ended"
        if not line_ok(e, act[j]):
            return f"expected line {i + 1}:\n    {e}\n  got:\n    {act[j]}"
        j += 1
    return f"unexpected extra output line: {act[j] if j < len(act) else ''}"


def scratch(repo, build, out, page):
    d = os.path.join(out, page.replace("/", "_").replace(".md", ""))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name in os.listdir(repo):
        if name in (".git", "build") or name.startswith("build-"):
            continue
        os.symlink(os.path.join(repo, name), os.path.join(d, name))
    os.symlink(build, os.path.join(d, "build"))
    return d


def run(script, cwd, env):
    p = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
    return p.returncode, p.stdout.decode("utf-8", "replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--tools", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--transformers", default="",
                    help="a python with transformers: run the 'sh transformers' blocks")
    ap.add_argument("--list", action="store_true", help="list the blocks, run nothing")
    ap.add_argument("pages", nargs="*")
    args = ap.parse_args()
    repo = os.path.abspath(args.repo)
    pages = args.pages or (["README.md"] + sorted(
        os.path.relpath(p, repo) for p in glob.glob(os.path.join(repo, "docs", "**", "*.md"),
                                                    recursive=True)))
    env = dict(os.environ)
    env["PATH"] = os.path.abspath(args.tools) + os.pathsep + env.get("PATH", "")
    hf_env = dict(env)
    if args.transformers:
        # The interpreter's folder as it is (a venv's bin/python is a link:
        # resolving it would leave the venv).
        hf_env["PATH"] = (os.path.abspath(args.tools) + os.pathsep +
                          os.path.dirname(os.path.abspath(args.transformers)) +
                          os.pathsep + os.environ.get("PATH", ""))
    failures, counts, manual = [], {"ran": 0, "commands": 0, "gpu": 0,
                                    "transformers": 0, "outputs": 0}, []
    for page in pages:
        blocks, errors = parse(repo, page)
        failures += errors
        runnable = [b for b in blocks if b.info in RUN_KINDS]
        if not runnable or args.list:
            for b in runnable:
                print(f"{b.where()}: {b.info}, {len(commands(b.body))} commands"
                      + (", output compared" if b.expected is not None else ""))
            continue
        cwd = scratch(repo, os.path.abspath(args.build), args.out, page)
        for b in runnable:
            cmds = commands(b.body)
            if b.info == "sh manual":
                manual.append(b.where())
                print(f"{b.where()}: manual, not run: {cmds[0] if cmds else ''}")
                continue
            if b.info == "sh gpu" and not args.gpu:
                counts["gpu"] += 1
                print(f"{b.where()}: gpu, skipped without one")
                continue
            if b.info == "sh transformers" and not args.transformers:
                counts["transformers"] += 1
                print(f"{b.where()}: transformers, skipped without it")
                continue
            benv = hf_env if b.info == "sh transformers" else env
            t0 = time.time()
            try:
                if b.info == "sh fails":
                    output, problem = "", None
                    for c in cmds:
                        rc, text = run(c, cwd, benv)
                        output += text
                        if not 1 <= rc <= 126:
                            how = f"was killed by signal {-rc}" if rc < 0 else f"exited {rc}"
                            problem = f"'{c}' {how}, expected a clear error (1..126)"
                            break
                else:
                    rc, output = run("set -eo pipefail\n" + "\n".join(b.body), cwd, benv)
                    problem = None if rc == 0 else f"exited {rc}"
            except subprocess.TimeoutExpired:
                output, problem = "", f"did not finish in {TIMEOUT_S} s"
            if problem is None and b.expected is not None:
                problem = matches(b.expected, output.split("\n"))
                counts["outputs"] += 1
            counts["ran"] += 1
            counts["commands"] += len(cmds)
            took = time.time() - t0
            if problem:
                tail = "\n".join("    | " + l for l in output.rstrip().split("\n")[-15:])
                failures.append(f"{b.where()}: {b.info} block failed: {problem}\n{tail}")
                print(f"{b.where()}: FAILED ({took:.1f} s)")
            else:
                print(f"{b.where()}: ok ({len(cmds)} commands, {took:.1f} s)")
    if args.list:
        sys.stdout.flush()
        for f in failures:
            print("error: " + f, file=sys.stderr)
        return 1 if failures else 0
    print(f"ran {counts['ran']} blocks ({counts['commands']} commands), "
          f"compared {counts['outputs']} outputs; skipped: {counts['gpu']} gpu, "
          f"{counts['transformers']} transformers, "
          f"{len(manual)} manual")
    for m in manual:
        print(f"manual: {m}")
    sys.stdout.flush()
    for f in failures:
        print("error: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
