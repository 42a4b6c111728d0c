#!/usr/bin/env python3
"""Groups translation units for clang-tidy (scripts/lint.sh): one file of #includes per library
or test binary, in a compilation database of its own, so that clang-tidy parses and walks the
headers a group's sources share (Asio, Beast, gRPC) once for all of them. Its findings still
name each source's file and line.

  tidy_groups.py DB SRC OUT                 every product source under SRC in DB, and the tests
                                            there that take a lock; prints them, one a line
  tidy_groups.py DB SRC OUT --together F... the files F as one group, with the flags of the
                                            first's entry (else of a product source's)

Writes OUT/NN_<target>.cc (…_test.cc for a group of tests, so that lint.sh treats it as one)
and OUT/compile_commands.json, the groups with their flags (those of their sources, which share
them: a group is the sources of one target with the same command but for their own names).
"""

import collections
import json
import os
import re
import shlex
import sys

# The only test code -Wthread-safety has anything to say about.
LOCK = re.compile(r"absl::Mutex|SpinLock|ABSL_[A-Z_]*(GUARDED_BY|LOCKS|REQUIRES)")


def flags_of(entry):
    """The entry's command without its source, its output and -c."""
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    skip = {"-o", "-c"}
    return tuple(a for i, a in enumerate(args)
                 if a not in skip and a != entry["file"] and (i == 0 or args[i - 1] not in skip))


def write_groups(out, groups):
    """groups: [(name, directory, flags, members)]. Rewrites a group's file only if it changed."""
    os.makedirs(out, exist_ok=True)
    db = []
    for name, directory, flags, members in groups:
        path = os.path.join(out, name)
        text = "".join(f'#include "{m}"\n' for m in members)
        if not os.path.exists(path) or open(path, encoding="utf-8").read() != text:
            with open(path, "w", encoding="utf-8") as w:
                w.write(text)
        db.append({"directory": directory, "file": path,
                   "arguments": [flags[0], "-c", path, *flags[1:]]})
    with open(os.path.join(out, "compile_commands.json"), "w", encoding="utf-8") as w:
        json.dump(db, w, indent=1)


def main(argv):
    db_path, src, out = argv[1:4]
    entries = {e["file"]: e for e in json.load(open(db_path, encoding="utf-8"))}
    if argv[4:5] == ["--together"]:
        files = argv[5:]
        entry = entries.get(files[0]) or next(
            e for f, e in sorted(entries.items())
            if f.startswith(src) and not f.endswith("_test.cc"))
        suffix = "_test.cc" if files[0].endswith("_test.cc") else ".cc"
        write_groups(out, [("together" + suffix, entry["directory"], flags_of(entry), files)])
        return 0

    def wanted(f):
        return f.startswith(src) and (
            not f.endswith("_test.cc") or LOCK.search(open(f, encoding="utf-8").read()))

    files = sorted(f for f in entries if wanted(f))
    groups = collections.defaultdict(list)
    for f in files:
        target = re.search(r"CMakeFiles/([^/]+)\.dir/", json.dumps(entries[f])).group(1)
        groups[(target, f.endswith("_test.cc"), flags_of(entries[f]))].append(f)
    write_groups(out, [
        (f"{n:02d}_{target}" + ("_test.cc" if test else ".cc"),
         entries[members[0]]["directory"], flags, members)
        for n, ((target, test, flags), members) in enumerate(sorted(groups.items()))])
    print("\n".join(files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
