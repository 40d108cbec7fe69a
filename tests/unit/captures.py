"""Parsers that only the tests need: they turn captured text (``ip -br addr``, ``free -h``, ``/etc/hosts``,
``docker inspect`` of a rank) into the shapes the production code reads. The nodes hand those shapes over as
JSON or facts (``ip -j``, ``/proc/meminfo``, docker_cli), so these left plugins/module_utils (issue 15: no
test-only helper in production code). Their own unit tests stay where they were and import them from here.
"""
import re
from decimal import Decimal

from ansible_collections.dgxspark.vllm.plugins.module_utils.docker_cli import load_inspect, parse_container
from ansible_collections.dgxspark.vllm.plugins.module_utils.docker_rank import _with_spec
from ansible_collections.dgxspark.vllm.plugins.module_utils.node_checks import BYTES_PER_GIB, NodeCheckError
from ansible_collections.dgxspark.vllm.plugins.module_utils.rdma import RdmaError, _ipv4_entry, _new_netdev


# --- from plugins/module_utils/rdma.py

def _split_addr_tokens(dev, tokens, line):
    for tok in tokens:
        if tok == 'metric' or tok.isdigit():
            continue  # `metric 100` trails some addresses (fixture two-twin-slash29)
        if '/' not in tok:
            raise RdmaError('ip -br addr: unexpected token %r in line %r' % (tok, line))
        if ':' in tok:
            dev['ipv6'].append(tok)  # may be masked (fe80::xxxx/64): kept opaque
            continue
        addr, plen = tok.split('/', 1)
        try:
            dev['ipv4'].append(_ipv4_entry(addr, plen))
        except ValueError:
            raise RdmaError('ip -br addr: bad IPv4 %r in line %r' % (tok, line))


def parse_ip_brief_addr(text):
    """Parse ``ip -br [-4] addr`` (name, state, addresses). No MTU in this form."""
    out = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) < 2:
            raise RdmaError('ip -br addr line has no state column: %r' % line)
        dev = _new_netdev(parts[0].split('@', 1)[0])
        dev['operstate'] = parts[1]
        _split_addr_tokens(dev, parts[2:], line)
        out[dev['ifname']] = dev
    return out


def parse_ip_brief_link(text):
    """Parse ``ip -br link`` (name, state, MAC, <flags>)."""
    out = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) < 2:
            raise RdmaError('ip -br link line has no state column: %r' % line)
        dev = _new_netdev(parts[0].split('@', 1)[0])
        dev['operstate'] = parts[1]
        flags = [p for p in parts[2:] if p.startswith('<') and p.endswith('>')]
        if flags:
            dev['flags'] = [f for f in flags[-1][1:-1].split(',') if f]
        out[dev['ifname']] = dev
    return out


_IP_SHOW_HEAD = re.compile(r'^\d+:\s+(?P<name>[^:@\s]+)(?:@\S+)?:\s+<(?P<flags>[^>]*)>(?P<rest>.*)$')


def parse_ip_addr_show(text):
    """Parse the classic ``ip addr [show dev X]`` text form."""
    out = {}
    dev = None
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _IP_SHOW_HEAD.match(line)
        if m:
            dev = _new_netdev(m.group('name'))
            dev['flags'] = [f for f in m.group('flags').split(',') if f]
            rest = m.group('rest').split()
            for key, val in zip(rest, rest[1:]):
                if key == 'mtu':
                    dev['mtu'] = int(val)
                elif key == 'state':
                    dev['operstate'] = val
            out[dev['ifname']] = dev
            continue
        words = line.split()
        if dev is None:
            raise RdmaError('ip addr: address line before any interface line: %r' % line)
        if words[0] == 'inet' and len(words) > 1:
            try:
                addr, plen = words[1].split('/', 1)
                entry = _ipv4_entry(addr, plen)
            except ValueError:
                raise RdmaError('ip addr: bad inet line %r' % line)
            if 'scope' in words[:-1]:
                entry['scope'] = words[words.index('scope') + 1]
            dev['ipv4'].append(entry)
        elif words[0] == 'inet6' and len(words) > 1:
            dev['ipv6'].append(words[1])
    return out


# --- from plugins/module_utils/node_checks.py

_FREE_UNITS = {
    "B": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4, "P": 1024 ** 5,
    "KI": 1024, "MI": 1024 ** 2, "GI": 1024 ** 3, "TI": 1024 ** 4, "PI": 1024 ** 5,
}


_FREE_COLUMNS = {
    "mem": ("total", "used", "free", "shared", "buff_cache", "available"),
    "swap": ("total", "used", "free"),
}


def parse_size(token):
    """A ``free -h`` figure (``119Gi``, ``1,4Gi``, ``5.3Mi``, ``0B``) -> bytes as Decimal.

    Binary units (procps prints Ki/Mi/Gi); a decimal comma is accepted (tests/fixtures/node/free-h-idle-119gi.txt comma-decimal locale).
    """
    m = re.match(r"^\s*([0-9]+(?:[.,][0-9]+)?)\s*([KMGTP]i?|B)?\s*$", token, re.IGNORECASE)
    if not m:
        raise NodeCheckError("cannot read size %r (expected e.g. 119Gi, 1,4Gi, 0B)" % token)
    number = Decimal(m.group(1).replace(",", "."))
    unit = (m.group(2) or "B").upper()
    return number * _FREE_UNITS[unit]


def parse_free(text):
    """``free -h`` rows -> {'mem': {...}, 'swap': {...}} in GiB (float).

    The header line is optional (the captures quote only the rows); columns are procps order.
    """
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        key = parts[0].rstrip(":").lower()
        if key not in _FREE_COLUMNS:
            continue
        names = _FREE_COLUMNS[key]
        values = parts[1:1 + len(names)]
        if len(values) != len(names):
            raise NodeCheckError("free row %r has %d figures, expected %d" % (parts[0], len(values), len(names)))
        out[key] = dict((n, float(parse_size(v) / BYTES_PER_GIB)) for n, v in zip(names, values))
    if "mem" not in out:
        raise NodeCheckError("no 'Mem:' row in free output")
    return out


def parse_hosts(text):
    """/etc/hosts text -> {name: [addresses in file order]}."""
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        for name in parts[1:]:
            out.setdefault(name, []).append(parts[0])
    return out


# --- from plugins/module_utils/docker_rank.py

def parse_inspect(text):
    """`docker inspect <name>` JSON -> the fields this module reports (None when absent).

    The JSON is read by docker_cli.parse_container; this adds the rank's spec labels.
    """
    return _with_spec(parse_container(load_inspect(text)))


def parse_id(text):
    """``id`` output -> {uid, user, gid, group, groups: [names]} (catalogue docker_group_missing)."""
    out = {"uid": None, "user": None, "gid": None, "group": None, "groups": []}
    m = re.search(r"uid=(\d+)(?:\(([^)]*)\))?", text)
    if m:
        out["uid"], out["user"] = int(m.group(1)), m.group(2)
    m = re.search(r"gid=(\d+)(?:\(([^)]*)\))?", text)
    if m:
        out["gid"], out["group"] = int(m.group(1)), m.group(2)
    m = re.search(r"groups=(\S+)", text)
    if m:
        for item in m.group(1).split(","):
            g = re.match(r"^(\d+)(?:\(([^)]*)\))?$", item)
            if g:
                out["groups"].append(g.group(2) if g.group(2) is not None else g.group(1))
    return out


def parse_df_h_row(line):
    """One ``df -h`` data row -> {device, size_bytes, used_bytes, avail_bytes, use_pct, mount}.

    df -h prints binary units with a one-letter suffix (22G = 22 GiB), read like ``free -h``'s.
    """
    cells = line.split()
    if len(cells) != 6 or not cells[4].endswith("%"):
        raise NodeCheckError("not a df -h row: %r" % line)
    size, used, avail = [int(parse_size(c)) for c in cells[1:4]]
    return {"device": cells[0], "size_bytes": size, "used_bytes": used, "avail_bytes": avail,
            "use_pct": int(cells[4][:-1]), "mount": cells[5]}


def parse_g19_numbers(text):
    """The catalogue gpu_low_power figures (catalogue gpu_low_power) -> {'stuck': {util, sm, apps, max, power}, 'recovered': {sm, power}}."""
    m = re.search(r"util (\d+) %, SM clock median (\d+) MHz \(apps (\d+), max (\d+)\), power ([\d.]+) W", text)
    r = re.search(r"after AC removal:\s+SM (\d+) MHz, ([\d.]+) W", text)
    if not m or not r:
        raise ValueError("not the catalogue gpu_low_power figures: %r" % text[:80])
    return {"stuck": {"util": float(m.group(1)), "sm": float(m.group(2)), "apps": float(m.group(3)),
                      "max": float(m.group(4)), "power": float(m.group(5))},
            "recovered": {"sm": float(r.group(1)), "power": float(r.group(2))}}


# --- process listings (plugins/module_utils/processes.py reads /proc; the captures are `ps` listings)

SESSION_CGROUP = "0::/user.slice/user-1000.slice/session-3.scope"


def processes_from_ps(text, cgroups=None):
    """A `ps -eo pid,rss:10,comm:16,args` listing as processes.read_processes' records ({pid, comm, argv, rss_kib,
    cgroup}). Columns are cut at the header: PID and RSS are the words before the first COMMAND, the process name
    lies between the two COMMAND headers (it may hold spaces), the arguments follow. cgroups: {pid: cgroup line}."""
    lines = [l for l in text.splitlines() if l.strip()]
    head = lines[0]
    comm_at = head.index("COMMAND")
    args_at = head.index("COMMAND", comm_at + 1)
    out = []
    for line in lines[1:]:
        pid, rss = line[:comm_at].split()
        out.append({"pid": int(pid), "comm": line[comm_at:args_at].strip(), "argv": line[args_at:].split(),
                    "rss_kib": int(rss), "cgroup": (cgroups or {}).get(int(pid), SESSION_CGROUP)})
    return out


def proc_tree_from_ps(text, root, cgroups=None):
    """Lay out a `ps` listing (processes_from_ps) as a /proc tree under root (comm, cmdline with NULs between the
    arguments, status with VmRSS, cgroup), so the tests run the production reader on it. Returns the PIDs."""
    pids = []
    for p in processes_from_ps(text, cgroups):
        d = root / str(p["pid"])
        d.mkdir(parents=True)
        (d / "comm").write_text(p["comm"] + "\n")
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in p["argv"]) + b"\0")
        (d / "status").write_text("Name:\t%s\nVmRSS:\t%8d kB\n" % (p["comm"], p["rss_kib"]))
        (d / "cgroup").write_text(p["cgroup"] + "\n")
        pids.append(p["pid"])
    return pids
