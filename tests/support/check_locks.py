#!/usr/bin/env python3
"""The lock table in docs/architecture.md against the code: every Mutex member
in src/ is a row (`Class::member`), every row is a Mutex that exists, each
mutex guards something the compiler can see (an XPU_GUARDED_BY, XPU_REQUIRES
or XPU_ACQUIRED_BEFORE naming it) unless its row says it only orders, and no
file in src/ uses std::mutex, which clang's -Wthread-safety cannot check.

  check_locks.py ROOT
"""
import re
import sys
from pathlib import Path

CLASS = re.compile(r'\b(class|struct)\s+(?:XPU_\w+(?:\([^)]*\))?\s+)?(\w+(?:::\w+)*)'
                   r'(?:\s+final)?\s*(?::(?!:)[^{;]*)?\{')
MUTEX = re.compile(r'^\s*(?:mutable\s+)?Mutex\s+(\w+)\b[^;]*;')
ROW = re.compile(r'^\|\s*`(\w+(?:::\w+)*)::(\w+)`\s*\|(.*)\|\s*$')


def strip(line):
    """The line without // comments and string literals (brace counting)."""
    line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(?:\\.|[^'\\])'", "''", line)
    return line.split('//', 1)[0]


def mutexes(path):
    """(Class::Nested, member, file text) for each Mutex member in `path`."""
    text = path.read_text()
    stack = []  # (name or None, depth at which it opened)
    depth = 0
    found = []
    for raw in text.split('\n'):
        line = strip(raw)
        m = MUTEX.match(line)
        if m and stack and stack[-1][0] is not None:
            found.append(('::'.join(n for n, _ in stack if n), m.group(1)))
        pos = 0
        for c in CLASS.finditer(line):
            # braces before the class's own '{' belong to the enclosing scope
            depth += line[pos:c.end() - 1].count('{') - line[pos:c.end() - 1].count('}')
            stack.append((c.group(2), depth))
            depth += 1
            pos = c.end()
        rest = line[pos:]
        for ch in rest:
            if ch == '{':
                depth += 1
                stack.append((None, depth - 1))
            elif ch == '}':
                depth -= 1
                while stack and stack[-1][1] >= depth:
                    stack.pop()
    return [(cls, member, text) for cls, member in found]


def main():
    root = Path(sys.argv[1])
    errors = []
    code = {}
    texts = {}
    for path in sorted((root / 'src').rglob('*')):
        if path.suffix not in ('.h', '.cc') or path.name == 'mutex.h':
            continue
        text = path.read_text()
        if re.search(r'\bstd::(mutex|recursive_mutex|shared_mutex|lock_guard|unique_lock)\b', text):
            errors.append(f'{path.relative_to(root)}: std::mutex and its locks are invisible to '
                          '-Wthread-safety; use xpu::Mutex and MutexLock (src/common/mutex.h)')
        for cls, member, _ in mutexes(path):
            code[f'{cls}::{member}'] = path
            texts.setdefault(f'{cls}::{member}', text)
    doc = (root / 'docs' / 'architecture.md').read_text()
    rows = {}
    for line in doc.split('\n'):
        m = ROW.match(line)
        if m:
            rows[f'{m.group(1)}::{m.group(2)}'] = (m.group(2), m.group(3))
    for name in sorted(set(code) - set(rows)):
        errors.append(f'{code[name].relative_to(root)}: {name} is not in the lock table '
                      '(docs/architecture.md, "Locks")')
    for name in sorted(set(rows) - set(code)):
        errors.append(f'docs/architecture.md: the lock table names {name}, which src/ does not have')
    for name in sorted(set(rows) & set(code)):
        member, what = rows[name]
        if not what.strip(' |'):
            errors.append(f'docs/architecture.md: {name} says nothing about what it guards')
        annotated = re.search(r'XPU_(GUARDED_BY|PT_GUARDED_BY|REQUIRES|ACQUIRED_BEFORE|ACQUIRED_AFTER)'
                              r'\([^)]*\b' + re.escape(member) + r'\b', texts[name])
        if not annotated and 'orders only' not in what:
            errors.append(f'{code[name].relative_to(root)}: nothing is XPU_GUARDED_BY({member}) '
                          f'in {name}\'s file; annotate what it guards, or say "orders only" in its row')
    for e in errors:
        print(e)
    print(f'check_locks: {len(code)} mutexes in src/, {len(rows)} rows, {len(errors)} problem(s)')
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
