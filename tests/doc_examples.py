#!/usr/bin/env python3
"""Checks every fenced YAML example of the docs as a user would use it.

    SLUICE=build/release/sluice python3 tests/doc_examples.py [ROOT]
    SLUICE=build/release/sluice python3 tests/doc_examples.py --planted

Reads README.md and every docs/**/*.md under ROOT (default: this repository). Every ```yaml
fence must be introduced by a directive on the line just before it, an HTML comment that the
rendered page does not show:

    <!-- check: domain -->              a domain file: `sluice check-config FILE` says ok
    <!-- check: settings -->            a settings file, named directly: check-config says ok
    <!-- check: fails TEXT -->          check-config refuses it, and its output contains TEXT
    <!-- check: prometheus -->          a Prometheus configuration: `promtool check config` passes
    <!-- check: yaml WHAT -->           another program's configuration (WHAT names it): it
                                        parses as YAML (there is no such program here to run)

A directive may add `with NAME[,NAME...]` (before any TEXT): each NAME is made beside the
example before it is checked: NAME/ an empty directory; NAME=PATH a copy of the repository's file PATH;
NAME the content of the page's fence whose info string names it (```csv clients.csv), else one
line (a token). Each example is checked alone,
in a directory of its own. Prints each failure with its page and line, then `N passed, M failed`;
exits 1 if any failed or any YAML fence has no directive.

--planted checks this checker: on a made-up tree whose pages hold one example of each way to
drift (no directive, a domain file check-config refuses, an example marked to fail that passes,
a settings file naming a file not made for it) and one that holds, it must report exactly those
four failures and exit 1.
"""

import os
import pathlib
import re
import subprocess
import sys
import tempfile

import yaml

DIRECTIVE = re.compile(r"^<!-- check: (?P<body>.*?) -->$")
KINDS = ("domain", "settings", "fails", "prometheus", "yaml")


def fences(text):
    """Yields (line number, info string, body, line before) of each fenced block."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            # A fence may be indented (in a list item): its lines lose that indentation.
            indent = len(lines[i]) - len(lines[i].lstrip())
            info = lines[i].strip()[3:].strip()
            start = i
            i += 1
            body = []
            while i < len(lines) and not lines[i].lstrip().startswith("```"):
                body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
                i += 1
            before = lines[start - 1] if start > 0 else ""
            yield start + 1, info, "\n".join(body) + "\n", before
        i += 1


def parse_directive(line):
    """(kind, [names to make], argument) of a directive line, or None."""
    m = DIRECTIVE.match(line.strip())
    if not m:
        return None
    words = m.group("body").split()
    if not words or words[0] not in KINDS:
        return None
    kind, rest = words[0], words[1:]
    names = []
    if len(rest) >= 2 and rest[0] == "with":
        names = rest[1].split(",")
        rest = rest[2:]
    return kind, names, " ".join(rest).strip('"')


def make_files(where, names, named_fences, root):
    for name in names:
        name, _, source = name.partition("=")
        path = where / name
        if source:
            path.write_text((root / source).read_text())
            continue
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(named_fences.get(name, "a-token-for-the-example\n"))


def run(cmd, cwd):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def check(example, kind, argument, where, sluice):
    """Returns None when the example holds, else what went wrong."""
    if kind in ("yaml", "prometheus"):
        try:
            list(yaml.safe_load_all(example))
        except yaml.YAMLError as e:
            return f"not YAML: {e}"
        if kind == "yaml":
            return None
        (where / "prometheus.yml").write_text(example)
        code, out = run(["promtool", "check", "config", "prometheus.yml"], where)
        return None if code == 0 else f"promtool check config failed:\n{out}"
    name = "sluice.yaml" if kind == "settings" else "example.yaml"
    (where / name).write_text(example)
    code, out = run([sluice, "check-config", name], where)
    if kind == "fails":
        if code == 0:
            return f"check-config accepted an example marked to fail:\n{out}"
        if argument not in out:
            return f"check-config refused it, but without {argument!r}:\n{out}"
        return None
    if code != 0 or not out.startswith("ok:"):
        return f"check-config refused it (exit {code}):\n{out}"
    return None


PLANTED = """# Planted

```yaml
domain: no_directive
```

<!-- check: domain -->
```yaml
domain: refused
descriptors:
  - key: k
    rate_limit: {unit: fortnight, requests_per_unit: 1}
```

<!-- check: fails unknown key -->
```yaml
domain: passes_though_marked_to_fail
```

<!-- check: settings -->
```yaml
admin: {listen: 127.0.0.1:9091, token_file: not-made}
```

<!-- check: domain with clients.csv -->
```yaml
domain: holds
plans: {free: {limits: [{requests: 1, window: 1s}]}}
default_plan: free
clients: clients.csv
descriptors: [{key: api_key, plan_from: plan}]
```

```csv clients.csv
k1,free
```
"""


def planted(sluice):
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "docs").mkdir()
        (root / "README.md").write_text("# nothing to check\n")
        (root / "docs/planted.md").write_text(PLANTED)
        p = subprocess.run([sys.executable, __file__, str(root)], env=dict(os.environ, SLUICE=sluice),
                           capture_output=True, text=True, timeout=120)
    print(p.stdout, end="")
    expected = ["docs/planted.md:3:", "docs/planted.md:8 (domain)", "docs/planted.md:16 (fails)",
                "docs/planted.md:21 (settings)"]
    fails = [line for line in p.stdout.splitlines() if line.startswith("FAIL")]
    ok = (p.returncode == 1 and "1 passed, 4 failed" in p.stdout and len(fails) == 4
          and all(any(e in f for f in fails) for e in expected))
    print("planted: every drift was caught" if ok else "planted: FAILED: not the expected report")
    return 0 if ok else 1


def main():
    if sys.argv[1:] == ["--planted"]:
        return planted(os.path.abspath(os.environ.get("SLUICE", "build/release/sluice")))
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
    sluice = os.path.abspath(os.environ.get("SLUICE", root / "build/release/sluice"))
    pages = [root / "README.md"] + sorted((root / "docs").rglob("*.md"))
    passed = failed = 0
    for page in pages:
        text = page.read_text()
        blocks = list(fences(text))
        named = {}
        for _, info, body, _ in blocks:
            words = info.split()
            if len(words) == 2:
                named[words[1]] = body
        for line, info, body, before in blocks:
            if info.split()[:1] != ["yaml"]:
                continue
            where_in_docs = f"{page.relative_to(root)}:{line}"
            directive = parse_directive(before)
            if directive is None:
                print(f"FAIL {where_in_docs}: a yaml example without a `<!-- check: ... -->` line "
                      "just before it")
                failed += 1
                continue
            kind, names, argument = directive
            with tempfile.TemporaryDirectory() as tmp:
                where = pathlib.Path(tmp)
                make_files(where, names, named, root)
                problem = check(body, kind, argument, where, sluice)
            if problem:
                print(f"FAIL {where_in_docs} ({kind}): {problem}")
                failed += 1
            else:
                passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
