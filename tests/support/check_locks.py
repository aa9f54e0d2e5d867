#!/usr/bin/env python3
"""The lock table in docs/architecture.md against the code.

- Every Mutex member of a class in src/ is a row (`Class::member`, nested
  classes as `Outer::Inner::member`), and every row is a Mutex that exists.
- Each mutex guards something the compiler sees: an XPU_GUARDED_BY,
  XPU_PT_GUARDED_BY, XPU_REQUIRES or XPU_ACQUIRED_* naming it inside its own
  class, unless its row says it "orders only".
- No file in src/ or tools/ uses std::mutex and its kin, which clang's
  -Wthread-safety cannot see; each Mutex is declared one per line, so this
  check reads every one.

  check_locks.py ROOT
"""
import re
import sys
from pathlib import Path

CLASS_HEAD = re.compile(r'\b(?:class|struct)\s+(?:(?:\[\[[^\]]*\]\]|alignas\([^)]*\)|XPU_\w+(?:\([^)]*\))?)\s*)*'
                        r'(\w+(?:::\w+)*)(?:\s*<[^{};]*>)?(?:\s+final)?\s*(?::(?!:)[^{;]*)?$')
DECL_PREFIX = r'^\s*(?:(?:static|mutable|inline|thread_local|alignas\([^)]*\))\s+)*(?:::)?(?:xpu::)?'
MUTEX = re.compile(DECL_PREFIX + r'Mutex\s+(\w+)\s*(?:XPU_\w+\([^)]*\)\s*)*;')
MUTEX_START = re.compile(DECL_PREFIX + r'Mutex\b(?!\s*[&*(:<])')
STD_LOCKS = re.compile(r'\bstd::(mutex|recursive_mutex|timed_mutex|recursive_timed_mutex|'
                       r'shared_mutex|shared_timed_mutex|lock_guard|unique_lock|scoped_lock|'
                       r'shared_lock|condition_variable|condition_variable_any)\b')
ROW = re.compile(r'^\|\s*`(\w+(?:::\w+)*)::(\w+)`\s*\|(.*)\|\s*$')


def strip(text):
    """`text` with comments, string and character literals blanked (their
    newlines kept, so line numbers stay), in one pass: a "/*" inside a
    string is no comment, a quote inside a comment no string."""
    out = []
    i, n = 0, len(text)
    while i < n:
        if text.startswith('//', i):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif text[i] == '"':
            raw = re.match(r'R"([^(\s]*)\(', text[i - 1:i + 20]) if i > 0 and text[i - 1] == 'R' else None
            if raw:
                end = text.find(')' + raw.group(1) + '"', i)
                j = n if end < 0 else end + len(raw.group(1)) + 2
            else:
                j = i + 1
                while j < n and text[j] != '"' and text[j] != '\n':
                    j += 2 if text[j] == '\\' else 1
                j += 1
            out.append('""' + '\n' * text[i:j].count('\n'))
            i = j
        elif text[i] == "'" and not (i > 0 and text[i - 1].isalnum()):  # not a digit separator
            m = re.match(r"'(?:\\.[^']*|[^'\\\n])'", text[i:])
            j = i + (len(m.group(0)) if m else 1)
            out.append("''")
            i = j
        else:
            out.append(text[i])
            i += 1
    return ''.join(out)


def scan(code):
    """(qualified class, mutex member, the class's own body) for each Mutex
    member; the lines that declare a Mutex other than one per line; the
    lines that declare one outside a class."""
    bad, outside = [], []
    mutexes = {}  # offset of a Mutex declaration's line -> (line number, member)
    offset = 0
    for lineno, line in enumerate(code.split('\n'), 1):
        if MUTEX_START.match(line):
            m = MUTEX.match(line)
            if m:
                mutexes[offset] = (lineno, m.group(1))
            else:
                bad.append(lineno)
        offset += len(line) + 1
    # Walk the braces; the text since the last '{', '}' or ';' is the head of
    # what a '{' opens (a class head may span lines).
    stack = []  # [class name or None, body start, [members]]
    classes = []  # (qualified name, start, end, members)
    head_start = 0
    starts = sorted(mutexes)
    next_mutex = 0
    for i, ch in enumerate(code):
        while next_mutex < len(starts) and starts[next_mutex] <= i:
            lineno, member = mutexes[starts[next_mutex]]
            if stack and stack[-1][0] is not None:
                stack[-1][2].append(member)
            else:
                outside.append(lineno)
            next_mutex += 1
        if ch not in '{};':
            continue
        if ch == '{':
            m = CLASS_HEAD.search(' '.join(code[head_start:i].split()))
            stack.append([m.group(1) if m else None, i + 1, []])
        elif ch == '}' and stack:
            name, start, members = stack.pop()
            if name is not None:
                outer = [n for n, _, _ in stack if n]
                classes.append(('::'.join(outer + [name]), start, i, members))
        head_start = i + 1
    found = []
    for name, start, end, members in classes:
        # Its own body: without the bodies of the classes nested in it.
        own, at = [], start
        for _, s, e, _ in sorted(c for c in classes if start < c[1] and c[2] < end):
            if s >= at:
                own.append(code[at:s])
                at = e
        own.append(code[at:end])
        for member in members:
            found.append((name, member, ''.join(own)))
    return found, bad, outside


def main():
    root = Path(sys.argv[1])
    errors = []
    code = {}
    for path in sorted(list((root / 'src').rglob('*')) + list((root / 'tools').rglob('*'))):
        if path.suffix not in ('.h', '.cc') or path.name == 'mutex.h':
            continue
        rel = path.relative_to(root)
        text = strip(path.read_text())
        if STD_LOCKS.search(text):
            errors.append(f'{rel}: std::mutex and its kin are invisible to -Wthread-safety; use '
                          'xpu::Mutex, MutexLock and CondVar (src/common/mutex.h)')
        found, bad, outside = scan(text)
        for lineno in bad:
            errors.append(f'{rel}:{lineno}: declare one Mutex per line, on one line')
        for lineno in outside:
            errors.append(f'{rel}:{lineno}: a Mutex outside a class; make it a member of the class '
                          'whose data it guards, so that the table and the annotations can name it')
        if rel.parts[0] != 'src':
            continue
        for cls, member, body in found:
            key = f'{cls}::{member}'
            if key in code:
                errors.append(f'{rel}: {key} is also in {code[key][0]}: the table cannot tell them apart')
            code[key] = (rel, member, body)
    doc = (root / 'docs' / 'architecture.md').read_text()
    rows = {}
    for line in doc.split('\n'):
        m = ROW.match(line)
        if m:
            rows[f'{m.group(1)}::{m.group(2)}'] = m.group(3)
    for name in sorted(set(code) - set(rows)):
        errors.append(f'{code[name][0]}: {name} is not in the lock table '
                      '(docs/architecture.md, "Locks")')
    for name in sorted(set(rows) - set(code)):
        errors.append(f'docs/architecture.md: the lock table names {name}, which src/ does not have')
    for name in sorted(set(rows) & set(code)):
        rel, member, body = code[name]
        what = rows[name]
        if not what.strip(' |'):
            errors.append(f'docs/architecture.md: {name} says nothing about what it guards')
        annotated = re.search(r'XPU_(GUARDED_BY|PT_GUARDED_BY|REQUIRES|ACQUIRED_BEFORE|'
                              r'ACQUIRED_AFTER)\([^)]*\b' + re.escape(member) + r'\b', body)
        if not annotated and 'orders only' not in what:
            errors.append(f'{rel}: nothing in {name.rsplit("::", 1)[0]} is XPU_GUARDED_BY({member}) '
                          'or XPU_REQUIRES it; annotate what it guards, or say "orders only" in '
                          'its row')
    for e in errors:
        print(e)
    print(f'check_locks: {len(code)} mutexes in src/, {len(rows)} rows, {len(errors)} problem(s)')
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
