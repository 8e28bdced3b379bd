#!/usr/bin/env python3
"""Reports import cycles between the files of each crate: files that import each other, directly or
around a circle.

Usage: scripts/module_cycles.py [--tests] [CRATE_DIR ...]   (default: every crates/*/ with a src/)
  --tests  also count test code (`#[cfg(test)]` items and test-only files). Off by default: test
           code compiles into the test binary only, and the shared operator test harness builds
           operators by name through the registry, which imports every operator.
Exit status: 0 when no crate has a cycle, 1 otherwise.

How it reads the code (text only, no compiler):
- Each file under `src/` is one module: `lib.rs` is the crate root, `a/b.rs` and `a/b/mod.rs` are
  `a::b`. Inline `mod name { … }` blocks (tests) count as part of their file.
- The edges of a file are the paths it names: `use` trees (braces expanded), and paths in code that
  start with `crate::`, `super::`, `self::` or the name of a child module the file declares
  (`binary::OPS` in a family's `mod.rs`). Comments and string literals are skipped.
- A path resolves to the deepest module file it names. When it lands on the crate root or on a
  `mod.rs` and the item is one of that file's `pub use` re-exports, it follows the re-export to
  the file that defines the item, so a cycle hidden by a re-export is still seen.
- Not edges: `mod x;` declarations, the `pub use` lines of `lib.rs` and `mod.rs` themselves (they
  only re-export), and anything reaching the crate root (`lib.rs` is ignored as a node).
- A cycle is a strongly connected component of more than one file; for each one it prints the
  files and, for each file, which of the others it names and on which line.
"""

import os
import re
import sys
from collections import defaultdict

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments_and_strings(text):
    """Blanks comments, string and char literals (keeping newlines so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'r(#*)"', text[i:])
            close = '"' + m.group(1)
            j = text.find(close, i + len(m.group(0)))
            j = n if j < 0 else j + len(close)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a): only blank literals.
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(src, path):
    """The module path (a tuple) of a file under `src`."""
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel == ["lib"] or rel == ["main"]:
        return ()
    if rel[-1] == "mod":
        rel = rel[:-1]
    return tuple(rel)


def expand_use_tree(tree):
    """`a::{b,c::{d,e},self}` (aliases and spaces already gone) → [[a,b], [a,c,d], [a,c,e], [a]]."""

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        return parts

    def walk(s, prefix):
        brace = s.find("{")
        if brace >= 0:
            head = [p for p in s[:brace].split("::") if p]
            inner = s[brace + 1:s.rfind("}")]
            result = []
            for part in split_top(inner):
                result.extend(walk(part, prefix + head))
            return result
        segs = [p for p in s.split("::") if p]
        if segs == ["self"]:
            return [prefix]
        return [prefix + segs]

    return walk(tree, [])


USE_RE = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.S)
CODE_PATH_RE = re.compile(r"(?<![A-Za-z0-9_:])((?:crate|super|self)(?:::" + IDENT + r")+)")
MOD_DECL_RE = re.compile(r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", re.M)
INLINE_MOD_RE = re.compile(r"\bmod\s+(\$?" + IDENT + r")\s*\{")
CFG_TEST_RE = re.compile(r"#\[cfg\(test\)\]")


def blank_test_items(text):
    """Blanks every item behind `#[cfg(test)]` (to the end of its block or `;`), and returns the
    text with the names of the file modules declared test-only (`#[cfg(test)] mod x;`)."""
    test_mods = set()
    out = list(text)
    for m in CFG_TEST_RE.finditer(text):
        j, depth = m.end(), 0
        decl = re.match(r"\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", text[j:])
        if decl:
            test_mods.add(decl.group(1))
        while j < len(text):
            ch = text[j]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    j += 1
                    break
            elif ch == ";" and depth == 0:
                j += 1
                break
            j += 1
        for k in range(m.start(), j):
            if out[k] != "\n":
                out[k] = " "
    return "".join(out), test_mods


def use_paths(raw_tree):
    """Paths of one `use` tree with `as` aliases dropped."""
    tree = re.sub(r"\s+as\s+" + IDENT, "", raw_tree)
    tree = re.sub(r"\s+", "", tree)
    return expand_use_tree(tree)


class Crate:
    def __init__(self, root, tests=False):
        self.root = root
        self.src = os.path.join(root, "src")
        self.files = {}  # module path -> file
        self.text = {}  # file -> stripped text
        for dirpath, _, names in os.walk(self.src):
            for name in names:
                if name.endswith(".rs"):
                    path = os.path.join(dirpath, name)
                    self.files[module_of(self.src, path)] = path
        test_only = set()
        for mod, path in self.files.items():
            with open(path, encoding="utf-8") as f:
                self.text[path] = strip_comments_and_strings(f.read())
            if not tests:
                self.text[path], names = blank_test_items(self.text[path])
                test_only |= {mod + (name,) for name in names}
        # Files compiled only for tests (and the files below them) leave the graph.
        for mod in list(self.files):
            if any(mod[:len(t)] == t for t in test_only):
                del self.text[self.files.pop(mod)]
        # Re-exports of each module file: name -> absolute path (tuple of segments).
        self.reexports = defaultdict(dict)
        self.glob_reexports = defaultdict(list)
        for mod, path in self.files.items():
            for m in USE_RE.finditer(self.text[path]):
                if not m.group(1):
                    continue
                for p in use_paths(m.group(2)):
                    absolute = self.absolute(mod, (), p)
                    if absolute is None:
                        continue
                    if absolute[-1] == "*":
                        self.glob_reexports[mod].append(absolute[:-1])
                    else:
                        self.reexports[mod][absolute[-1]] = absolute

    def children(self, mod):
        return {m[-1] for m in self.files if len(m) == len(mod) + 1 and m[:len(mod)] == mod}

    def absolute(self, file_mod, inline, path):
        """The crate-absolute segments of `path` as written in `file_mod` (inside inline modules
        `inline`), or None when it leaves the crate."""
        if not path:
            return None
        here = file_mod + inline
        head = path[0]
        if head == "crate":
            return tuple(path[1:])
        if head == "self":
            return here + tuple(path[1:])
        if head == "super":
            cur, rest = here, list(path)
            while rest and rest[0] == "super":
                if not cur:
                    return None
                cur, rest = cur[:-1], rest[1:]
            return cur + tuple(rest)
        # A bare path: relative to the file when it names a child module (2018 edition rules).
        if head in self.children(file_mod) and not inline:
            return file_mod + tuple(path)
        return None

    def resolve(self, segs, seen=None):
        """The file that defines what `segs` names (following re-exports), or None."""
        seen = seen or set()
        segs = tuple(segs)
        if segs in seen:
            return None
        seen.add(segs)
        # The deepest module file that is a prefix of the path.
        depth = max(d for d in range(len(segs) + 1) if segs[:d] in self.files)
        mod = segs[:depth]
        rest = segs[depth:]
        path = self.files[mod]
        is_reexporter = mod == () or path.endswith("mod.rs")
        if rest and is_reexporter and rest[0] in self.reexports[mod]:
            target = self.reexports[mod][rest[0]] + rest[1:]
            return self.resolve(target, seen) or path
        if rest and is_reexporter and rest[0] != "*":
            for g in self.glob_reexports[mod]:
                found = self.resolve(g + rest, seen)
                if found and found != path:
                    return found
        return path

    def edges(self):
        """file -> {target file: first line naming it}."""
        result = defaultdict(dict)
        for mod, path in self.files.items():
            text = self.text[path]
            is_reexporter = mod == () or path.endswith("mod.rs")
            # Inline module spans, to resolve `super::` inside `mod tests { … }`.
            spans = []
            for m in INLINE_MOD_RE.finditer(text):
                depth, j = 1, m.end()
                while j < len(text) and depth:
                    depth += {"{": 1, "}": -1}.get(text[j], 0)
                    j += 1
                spans.append((m.start(), j, m.group(1)))

            def inline_at(pos):
                return tuple(name for start, end, name in spans if start <= pos < end)

            def add(pos, absolute):
                if absolute is None:
                    return
                target = self.resolve(absolute)
                if target is None or target == path or module_of(self.src, target) == ():
                    return
                line = text.count("\n", 0, pos) + 1
                result[path].setdefault(target, line)

            use_spans = []
            for m in USE_RE.finditer(text):
                use_spans.append((m.start(), m.end()))
                if m.group(1) and is_reexporter:
                    continue  # a re-export: part of the module's declaration
                for p in use_paths(m.group(2)):
                    add(m.start(), self.absolute(mod, inline_at(m.start()), p))
            for m in CODE_PATH_RE.finditer(text):
                if any(s <= m.start() < e for s, e in use_spans):
                    continue
                add(m.start(), self.absolute(mod, inline_at(m.start()), m.group(1).split("::")))
            for child in self.children(mod):
                for m in re.finditer(r"(?<![A-Za-z0-9_:])" + child + r"((?:::" + IDENT + r")+)", text):
                    if any(s <= m.start() < e for s, e in use_spans):
                        continue
                    add(m.start(), mod + (child,) + tuple(m.group(1).split("::")[1:]))
        return result


def strongly_connected(graph):
    """Tarjan's algorithm, iterative."""
    index, low, on_stack, stack, order, comps = {}, {}, set(), [], [0], []
    nodes = set(graph) | {t for ts in graph.values() for t in ts}

    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = order[0]
        order[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = order[0]
                    order[0] += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    v = stack.pop()
                    on_stack.discard(v)
                    comp.append(v)
                    if v == node:
                        break
                comps.append(sorted(comp))
    return comps


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(here)
    tests = "--tests" in argv
    argv = [a for a in argv if a != "--tests"]
    crates = argv or sorted(
        os.path.join(repo, "crates", c)
        for c in os.listdir(os.path.join(repo, "crates"))
        if os.path.isdir(os.path.join(repo, "crates", c, "src"))
    )
    found = 0
    for root in crates:
        crate = Crate(root, tests)
        graph = crate.edges()
        cycles = [c for c in strongly_connected(graph) if len(c) > 1]
        name = os.path.basename(os.path.normpath(root))
        print(f"{name}: {len(crate.files)} files, {len(cycles)} cycle(s)")
        for comp in cycles:
            found += 1
            rel = lambda p: os.path.relpath(p, crate.src)
            print(f"  cycle of {len(comp)}: {', '.join(rel(p) for p in comp)}")
            for p in comp:
                for target, line in sorted(graph[p].items()):
                    if target in comp:
                        print(f"    {rel(p)}:{line} -> {rel(target)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
