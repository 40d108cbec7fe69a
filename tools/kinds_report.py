# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""The counts of issue 29's Done-when, computed by the real code: every declared option by kind, every hostile
value of the generated suite checked by its kind (refused or accepted), every rendering of a corpus value into a
file through its file-kind filter (refused, inert, or live), and systemd-analyze on the rendered units.

  PYTHONPATH=$PWD/collections python3 tools/kinds_report.py [--json reports/kinds-report.json]

The corpus and the renderers are the ones tests/unit/test_hostile_values.py asserts on (imported, not copied).
Exit status 1 when a hostile value was accepted by its kind or reached a file live.
"""
import argparse
import collections
import json
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "collections")]

from ansible_collections.dgxspark.vllm.plugins.module_utils import escape, kinds  # noqa: E402
from tests.unit import test_hostile_values as suite  # noqa: E402


def _shown(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def option_rows():
    """(source, option, kind name, hostile values, accepted values) of every declared option."""
    rows = []
    for role, key, spec in suite.DECLARED:
        values = suite.corpus(spec)
        rows.append(("role " + role, key, kinds.normalise(spec)[0], values,
                     [v for v in values if kinds.problem(spec, v, key, "report") is None]))
    for key, spec in suite.PARAMETERS:
        values = suite.corpus(spec)
        rows.append(("playbook parameter", key, kinds.normalise(spec)[0], values,
                     [v for v in values if kinds.problem(spec, v, key, "report") is None]))
    for path, node in suite.LANE_LEAVES:
        kind = node.get("x-kind")
        kind = kinds.normalise(kind)[0] if kind else ("choice (enum)" if "enum" in node else "pattern")
        values = suite.lane_corpus(path, node)
        rows.append(("lane", path, kind, values, [v for v in values if not suite._lane_refuses(node, v)]))
    return rows


def systemd_rows():
    """systemd-analyze verify of the watchdog unit rendered from each value the filter let through."""
    if shutil.which("systemd-analyze") is None:
        return {"skipped": "systemd-analyze is not installed on this controller"}
    verified, problems = 0, []
    for slot in (2, 3):
        for value in suite.RENDER_VALUES:
            args = list(suite.DEFAULTS)
            args[slot] = value
            try:
                unit = suite._render_watchdog(*args)[2]
            except Exception:  # pylint: disable=broad-except
                continue  # refused by its filter: counted under file_renderings
            found, _out = escape.systemd_verify(unit, "dgxspark-vllm-watchdog.service", suite._run)
            verified += 1
            problems += ["%s: %s" % (_shown(value), p) for p in found]
    return {"units_verified": verified, "problems": problems}


def report():
    rows = option_rows()
    by_kind = collections.Counter(r[2] for r in rows)
    by_source = collections.Counter(r[0].split(" ")[0] if r[0].startswith("role") else r[0] for r in rows)
    accepted = [{"source": r[0], "option": r[1], "value": _shown(v)} for r in rows for v in r[4]]
    checked = sum(len(r[3]) for r in rows)
    files = collections.OrderedDict()
    live = []
    for f, slot, value, outcome in suite.file_outcomes():
        entry = files.setdefault(f, collections.Counter())
        entry["rendered"] += 1
        entry[outcome if outcome in ("refused", "inert") else "live"] += 1
        if outcome not in ("refused", "inert"):
            live.append({"file": f, "slot": slot, "value": _shown(value), "outcome": outcome})
    return {
        "options": {"total": len(rows), "by_source": dict(sorted(by_source.items())),
                    "by_kind": dict(sorted(by_kind.items()))},
        "hostile_values": {"checked": checked, "refused_on_controller": checked - len(accepted),
                           "accepted": accepted},
        "file_renderings": {"by_file": dict((f, dict(c)) for f, c in files.items()),
                            "total": sum(c["rendered"] for c in files.values()),
                            "refused_by_filter": sum(c["refused"] for c in files.values()),
                            "written_inert": sum(c["inert"] for c in files.values()),
                            "live": live},
        # a hostile value reaches a file only past its kind (controller) and then live past its filter: none is the goal
        "reached_a_file": len(accepted) + len(live),
        "systemd_analyze": systemd_rows(),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--json", help="also write the report here (e.g. reports/kinds-report.json)")
    args = parser.parse_args(argv)
    rep = report()
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(rep, f, indent=2, sort_keys=True)
            f.write("\n")
    o, h, fr = rep["options"], rep["hostile_values"], rep["file_renderings"]
    print("options: %d (%s)" % (o["total"], ", ".join("%s %d" % kv for kv in o["by_source"].items())))
    print("  by kind: " + ", ".join("%s %d" % kv for kv in o["by_kind"].items()))
    print("hostile values checked by their kind: %d, refused on the controller: %d, accepted: %d"
          % (h["checked"], h["refused_on_controller"], len(h["accepted"])))
    print("file renderings: %d, refused by the file-kind filter: %d, written inert: %d, live: %d"
          % (fr["total"], fr["refused_by_filter"], fr["written_inert"], len(fr["live"])))
    for f, c in fr["by_file"].items():
        print("  %s: %s" % (f, ", ".join("%s %d" % kv for kv in sorted(c.items()))))
    sa = rep["systemd_analyze"]
    print("systemd-analyze verify: " + (sa["skipped"] if "skipped" in sa else "%d units, %d problems"
                                        % (sa["units_verified"], len(sa["problems"]))))
    print("renderings that reached a file: %d" % rep["reached_a_file"])
    return 1 if rep["reached_a_file"] or sa.get("problems") else 0


if __name__ == "__main__":
    sys.exit(main())
