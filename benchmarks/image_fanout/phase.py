"""Wall seconds of a phase of an ansible-playbook run logged with the profile_tasks callback:
from the start of the first task whose name contains FIRST to the start of the next task whose
name contains AFTER (profile_tasks prints the run's elapsed time under every TASK header).

    phase.py LOG FIRST AFTER      -> seconds, or null when either task is not in the log
"""
import re
import sys


def phase(log, first, after):
    lines = open(log).read().splitlines()
    starts = []
    for i, line in enumerate(lines[:-1]):
        m = re.match(r"TASK \[(.*)\] \*+\s*$", line)
        c = re.search(r"(\d+):(\d\d):(\d\d\.\d+) \*+\s*$", lines[i + 1])
        if m and c:
            starts.append((m.group(1), int(c.group(1)) * 3600 + int(c.group(2)) * 60 + float(c.group(3))))
    t0 = next((t for name, t in starts if first in name), None)
    if t0 is None:
        return None
    t1 = next((t for name, t in starts if after in name and t >= t0), None)
    return None if t1 is None else round(t1 - t0, 1)


if __name__ == "__main__":
    v = phase(*sys.argv[1:4])
    print("null" if v is None else v)
