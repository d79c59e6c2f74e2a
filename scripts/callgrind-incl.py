#!/usr/bin/env python3
"""Inclusive instruction counts per function from a callgrind output file, the inlined
parts of a function (callgrind's fi=/fe= file switches) merged into it.

    scripts/callgrind-incl.py FILE REGEX...   prints, per REGEX, the summed inclusive count
                                              of the functions whose name matches it
    scripts/callgrind-incl.py --calls FILE CALLER CALLEE
                                              prints the inclusive count of the calls made by
                                              functions matching CALLER to functions matching
                                              CALLEE (one engine's link calls, when another
                                              party calls the same link functions)
Used by scripts/bench-instr.sh to split the count into engine, link and bench loop."""
import collections
import re
import sys


def inclusive(path):
    names, incl, calls = {}, collections.Counter(), collections.Counter()

    def name(tok):
        m = re.match(r"\((\d+)\)(?: (.*))?$", tok)
        if not m:
            return tok
        if m.group(2) is not None:
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), tok)

    cur, callee, in_call = None, None, False
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            if line.startswith("fn="):
                cur = name(line[3:])
            elif line.startswith("cfn="):
                callee = name(line[4:])
            elif line.startswith("calls="):
                in_call = True
            elif line[0].isdigit() or line[0] in "+-*":
                parts = line.split()
                if len(parts) < 2 or cur is None:
                    continue
                # A call's line carries the callee's inclusive cost; recursion is not
                # counted twice.
                if not in_call or callee != cur:
                    incl[cur] += int(parts[1])
                if in_call:
                    calls[(cur, callee)] += int(parts[1])
                in_call = False
    return incl, calls


def main():
    if sys.argv[1] == "--calls":
        _, calls = inclusive(sys.argv[2])
        caller, callee = re.compile(sys.argv[3]), re.compile(sys.argv[4])
        print(sum(v for (a, b), v in calls.items() if caller.search(a) and callee.search(b)))
        return
    incl, _ = inclusive(sys.argv[1])
    for pat in sys.argv[2:]:
        r = re.compile(pat)
        print(sum(v for k, v in incl.items() if r.search(k)))


if __name__ == "__main__":
    main()
