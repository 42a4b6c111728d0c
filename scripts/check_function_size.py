#!/usr/bin/env python3
"""No function body over 100 lines (the rule clang-tidy's readability-function-size enforced).

    python3 scripts/check_function_size.py [--max N] FILE...

A body's size is the line of its closing brace minus the line of its opening brace, as
clang-tidy counts it. A function whose first line, or any line of its signature, says
NOLINT(readability-function-size) (or a bare NOLINT) is exempt: a dispatch table, say why.

It reads the files as text, not as C++: comments, strings and character literals are blanked out,
then every brace block opened at file, namespace or class scope is a function body unless its
head (the text since the previous `;`, `{` or `}`) declares a namespace, class, struct, union or
enum, or ends in `=` (an initializer) or `extern "C"`. Lambdas and local classes lie inside their
function's body, which is at least as long. Why not clang-tidy: its check walks every function of
every header a source includes (Boost, gRPC), a ninth of `make lint`'s time, to measure ours.

Prints `FILE:LINE: error: ...` for each body over the limit; exits 1 if there is one.
"""
import re
import sys

NOLINT = re.compile(r"NOLINT(\((?:[^)]*,\s*)?readability-function-size\s*(?:,[^)]*)?\)|(?!\())")
SCOPE_HEAD = re.compile(r"\b(namespace|class|struct|union|enum)\b")


def keep(text):
    """`text` as spaces, its newlines kept."""
    return re.sub(r"[^\n]", " ", text)


def blank(text):
    """Comments, string and character literals replaced by spaces; newlines kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(keep(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(keep(text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\\s]{0,16})\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i + m.end())
            end = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + keep(text[i + 2:end]))
            i = end
        elif c in "\"'":
            # A digit separator (1'000'000) is not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + keep(text[i + 1:j]) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def bodies(text):
    """(opening line, closing line, head's first line) of every function body, 1-based."""
    # Preprocessor lines (and their continuations) blanked too: `#if defined(X)` is no head.
    code = re.sub(r"(?m)^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", lambda m: keep(m.group(0)), blank(text))
    line_of = lambda pos: code.count("\n", 0, pos) + 1
    found = []
    # Each open block: (kind, opening position, head's start). kind: "scope" (file, namespace,
    # class, extern "C"), "function", "inner" (anything inside a function, or an initializer).
    stack = [("scope", 0, 0)]
    head_start = 0
    for pos, c in enumerate(code):
        if c not in "{};":
            continue
        if c == ";":
            head_start = pos + 1
            continue
        if c == "{":
            kind = "inner"
            if stack[-1][0] == "scope":
                head = code[head_start:pos].strip()
                if SCOPE_HEAD.search(head) and "(" not in head.split(":")[0]:
                    kind = "scope"
                elif re.search(r'\bextern\s*"\s*"$', head):
                    kind = "scope"
                elif head.endswith("="):
                    kind = "inner"
                else:
                    kind = "function"
            stack.append((kind, pos, head_start))
        else:
            if len(stack) > 1:
                kind, opened, start = stack.pop()
                if kind == "function":
                    first = start + len(code[start:opened]) - len(code[start:opened].lstrip())
                    found.append((line_of(opened), line_of(pos), line_of(first)))
        head_start = pos + 1
    return found


def main(argv):
    limit = 100
    if len(argv) >= 2 and argv[0] == "--max":
        limit, argv = int(argv[1]), argv[2:]
    over = 0
    for path in argv:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        lines = text.split("\n")
        for opened, closed, first in bodies(text):
            size = closed - opened
            if size <= limit:
                continue
            if any(NOLINT.search(lines[i - 1]) for i in range(first, opened + 1)):
                continue
            over += 1
            print(f"{path}:{first}: error: function body of {size} lines, over {limit}; split it, "
                  f"or mark a dispatch table NOLINT(readability-function-size) with the reason "
                  f"[readability-function-size]")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
