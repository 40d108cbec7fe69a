# -*- coding: utf-8 -*-
# Copyright (c) 2026, dgxspark.vllm maintainers
# SPDX-License-Identifier: MIT
"""RDMA fabric discovery: pure parsing and planning logic (stdlib only).

Used on the node by the ``rdma_facts`` module (parsers, GID lookup) and on the controller by
the ``nccl_env`` filters (topology, rendezvous choice, NCCL/Gloo environment).
Rules cite the failure catalogue (docs/catalogue.md) by entry id; captured samples by their path under tests/fixtures.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
import os
import re


class RdmaError(ValueError):
    """Malformed input or a fabric that cannot work; the message names the item and a fix."""


# ---------------------------------------------------------------------------------------------
# ibdev2netdev (docs/rdma.md: `<hca> port <n> ==> <netdev> (Up|Down)`; `-v` adds fields, tolerated)

_IBDEV_RE = re.compile(
    r'^(?P<hca>\S+)\s(?:.*?\s)?port\s+(?P<port>\d+)(?:\s+\([^)]*\))?\s+==>\s+'
    r'(?P<netdev>\S+)\s+\((?P<state>Up|Down)\)\s*$')


def parse_ibdev2netdev(text):
    """Return ``[{hca, port, netdev, state}]`` in input order; raise RdmaError quoting a bad line."""
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _IBDEV_RE.match(line.strip())
        if not m:
            raise RdmaError(
                "ibdev2netdev line %d is not '<hca> port <n> ==> <netdev> (Up|Down)': %r"
                % (lineno, line))
        rows.append({'hca': m.group('hca'), 'port': int(m.group('port')),
                     'netdev': m.group('netdev'), 'state': m.group('state')})
    return rows


# ---------------------------------------------------------------------------------------------
# ip: every parser returns {ifname: {ifname, operstate, mtu, flags, ipv4: [..], ipv6: [..]}}

def _ipv4_entry(address, prefixlen):
    iface = ipaddress.IPv4Interface(u'%s/%s' % (address, prefixlen))
    return {'address': str(iface.ip), 'prefixlen': int(prefixlen), 'cidr': str(iface.network)}


def _new_netdev(ifname):
    return {'ifname': ifname, 'operstate': None, 'mtu': None, 'flags': [], 'ipv4': [], 'ipv6': []}


def _json_list(text, what):
    try:
        data = json.loads(text)
    except ValueError as e:
        lineno = getattr(e, 'lineno', 1)
        lines = text.splitlines() or ['']
        bad = lines[min(max(lineno, 1), len(lines)) - 1]
        raise RdmaError('%s output is not JSON (%s) at line %d: %r' % (what, e, lineno, bad[:200]))
    if not isinstance(data, list):
        raise RdmaError('%s output is not a JSON list: %r' % (what, text[:200]))
    for item in data:
        if not isinstance(item, dict) or not item.get('ifname'):
            raise RdmaError('%s entry has no ifname: %r' % (what, json.dumps(item)[:200]))
    return data


def _link_netdev(item):
    """A netdev record with the link fields both ``ip -j link`` and ``ip -j addr`` carry."""
    dev = _new_netdev(item['ifname'])
    dev['operstate'] = item.get('operstate')
    dev['mtu'] = item.get('mtu')
    dev['flags'] = list(item.get('flags') or [])
    if item.get('link_type'):
        dev['link_type'] = item['link_type']
    return dev


def parse_ip_json_link(text):
    """Parse ``ip -j link``."""
    out = {}
    for item in _json_list(text, 'ip -j link'):
        dev = _link_netdev(item)
        out[dev['ifname']] = dev
    return out


def parse_ip_json_addr(text):
    """Parse ``ip -j addr`` (which also carries operstate, mtu and flags)."""
    out = {}
    for item in _json_list(text, 'ip -j addr'):
        dev = _link_netdev(item)
        for a in item.get('addr_info') or []:
            try:
                if a.get('family') == 'inet':
                    entry = _ipv4_entry(a['local'], a['prefixlen'])
                    entry['scope'] = a.get('scope')
                    dev['ipv4'].append(entry)
                elif a.get('family') == 'inet6':
                    dev['ipv6'].append('%s/%s' % (a['local'], a['prefixlen']))
            except (KeyError, ValueError) as e:
                raise RdmaError('ip -j addr: bad address on %s (%s): %r' % (dev['ifname'], e, json.dumps(a)))
        out[dev['ifname']] = dev
    return out


def merge_netdevs(*sources):
    """Merge netdev maps (e.g. ``ip -j link`` and ``ip -j addr``); later non-empty values win."""
    out = {}
    for src in sources:
        for name, dev in (src or {}).items():
            cur = out.setdefault(name, _new_netdev(name))
            for key in ('operstate', 'mtu', 'link_type'):
                if dev.get(key) is not None:
                    cur[key] = dev[key]
            if dev.get('flags'):
                cur['flags'] = list(dev['flags'])
            for key in ('ipv4', 'ipv6'):
                for a in dev.get(key) or []:
                    if a not in cur[key]:
                        cur[key].append(a)
    return out


def usable_ipv4(dev):
    """First IPv4 that can carry the fabric: not loopback, not 169.254 autoconf (tests/fixtures/rdma/ip/unconfigured-spark-node-a.ip-br-addr.txt)."""
    for a in (dev or {}).get('ipv4') or []:
        ip = ipaddress.IPv4Address(a['address'])
        if not ip.is_loopback and not ip.is_link_local:
            return a
    return None


def netdev_is_up(dev):
    """UP by operstate (UNKNOWN counts when the carrier flag LOWER_UP is present)."""
    if not dev:
        return False
    state = (dev.get('operstate') or '').upper()
    if state == 'UP':
        return True
    return state == 'UNKNOWN' and 'LOWER_UP' in (dev.get('flags') or [])


# ---------------------------------------------------------------------------------------------
# GID tables (catalogue nccl_wrong_gid; docs/rdma.md)

def _read_text(path):
    try:
        with open(path, 'rb') as f:
            return f.read().decode('utf-8', 'replace').strip()
    except (IOError, OSError):
        return None  # real sysfs answers EINVAL for unused entries


def read_gid_table(sysfs_root, hca, port=1):
    """Return ``[{index, gid, type}]`` for every readable ``gids/<i>``, index order.

    ``type`` is None when ``gid_attrs/types/<i>`` is missing or unreadable.
    """
    base = os.path.join(sysfs_root, 'class', 'infiniband', hca, 'ports', str(port))
    gid_dir = os.path.join(base, 'gids')
    try:
        names = os.listdir(gid_dir)
    except OSError:
        return []
    table = []
    for name in sorted((n for n in names if n.isdigit()), key=int):
        gid = _read_text(os.path.join(gid_dir, name))
        if gid is None:
            continue
        table.append({'index': int(name), 'gid': gid,
                      'type': _read_text(os.path.join(base, 'gid_attrs', 'types', name))})
    return table


def gid_ipv4(gid):
    """The IPv4 an IPv4-mapped GID (``::ffff:a.b.c.d``) carries, else None (masked tokens too)."""
    try:
        ip = ipaddress.IPv6Address(u'%s' % (gid or '').strip())
    except ValueError:
        return None
    return str(ip.ipv4_mapped) if ip.ipv4_mapped else None


def gid_is_zero(gid):
    try:
        return int(ipaddress.IPv6Address(u'%s' % (gid or '').strip())) == 0
    except ValueError:
        return False


def select_roce_v2_gid_index(table, ipv4):
    """Index whose type is 'RoCE v2' and whose GID is the IPv4-mapped form of ``ipv4``."""
    if not ipv4:
        return None
    for entry in table:
        if (entry.get('type') or '').strip() == 'RoCE v2' and gid_ipv4(entry['gid']) == ipv4:
            return entry['index']
    return None


# ---------------------------------------------------------------------------------------------
# Device names, twins, ordering (tests/fixtures/rdma/ibdev2netdev/spark-2node-outer-port-f1-up.txt: twins share the fN suffix across PCI domains 0000/0002)

_PCI_NAME = re.compile(r'^(?P<kind>[a-z]+?)(?:P(?P<dom>\d+))?p(?P<bus>\d+)s(?P<slot>\d+)(?:f(?P<fn>\d+))?(?:np(?P<np>\d+))?$')


def _pci_parts(name):
    m = _PCI_NAME.match(name or '')
    if not m:
        return None
    return (m.group('kind'), int(m.group('dom') or 0), int(m.group('bus')), int(m.group('slot')),
            int(m.group('fn') or 0))


def device_sort_key(name):
    """PCI order (domain, bus, slot, function), else natural order (mlx5_2 < mlx5_10)."""
    parts = _pci_parts(name)
    if parts:
        return (0, parts[1:], name)
    return (1, [int(t) if t.isdigit() else t for t in re.split(r'(\d+)', name)], name)


def twin_of(hca, names):
    """The other PCIe half of the same physical port among ``names`` (rocep1s0f1 <-> roceP2p1s0f1)."""
    me = _pci_parts(hca)
    if not me:
        return None
    for other in names:
        op = _pci_parts(other)
        if other != hca and op and op[0] == me[0] and op[2:] == me[2:] and op[1] != me[1]:
            return other
    return None


def port_index(netdev):
    """Cage-side port index of a Spark netdev: the ``npN`` suffix, else the function number."""
    m = _PCI_NAME.match(netdev or '')
    if not m:
        return None
    return int(m.group('np')) if m.group('np') is not None else int(m.group('fn') or 0)


# ---------------------------------------------------------------------------------------------
# Per-host facts (the shape the rdma_facts module returns)

def is_loopback_address(address):
    try:
        return ipaddress.ip_address(u'%s' % address).is_loopback
    except ValueError:
        return False


def build_host_facts(ibdev_rows, netdevs, gid_tables, cma_total_kib=None, kernel=None,
                     hostname=None, hostname_ipv4=None):
    """Combine parsed inputs into ``{hcas, netdevs, cma_total_kib, kernel, hostname, hostname_ipv4}``.

    ``gid_tables`` maps ``(hca, port)`` (or ``hca``) to ``read_gid_table`` output.
    """
    names = [r['hca'] for r in ibdev_rows]
    hcas = []
    for row in sorted(ibdev_rows, key=lambda r: device_sort_key(r['hca'])):
        dev = netdevs.get(row['netdev'])
        addr = usable_ipv4(dev)
        table = gid_tables.get((row['hca'], row['port']), gid_tables.get(row['hca'], []))
        hcas.append({
            'hca': row['hca'],
            'port': row['port'],
            'netdev': row['netdev'],
            'state': row['state'],
            'twin': twin_of(row['hca'], names),
            'ipv4': addr['address'] if addr else None,
            'prefixlen': addr['prefixlen'] if addr else None,
            'cidr': addr['cidr'] if addr else None,
            'mtu': dev.get('mtu') if dev else None,
            'operstate': dev.get('operstate') if dev else None,
            'roce_v2_gid_index': select_roce_v2_gid_index(table, addr['address'] if addr else None),
            'gids': [g for g in table if not gid_is_zero(g['gid'])],
        })
    return {'hcas': hcas, 'netdevs': netdevs, 'cma_total_kib': cma_total_kib, 'kernel': kernel,
            'hostname': hostname, 'hostname_ipv4': list(hostname_ipv4 or [])}


def parse_cma_total_kib(meminfo_text):
    """``CmaTotal:  N kB`` from /proc/meminfo, or None when the line is absent (catalogue cma_zero)."""
    for line in (meminfo_text or '').splitlines():
        if line.startswith('CmaTotal:'):
            parts = line.split()
            try:
                return int(parts[1])
            except (IndexError, ValueError):
                raise RdmaError('meminfo: cannot read %r' % line)
    return None


# ---------------------------------------------------------------------------------------------
# NCCL_IB_HCA (catalogue nccl_hca_prefix: prefix match unless '=', '^' excludes, optional ':port' per item)

def parse_nccl_ib_hca(value):
    """Return ``{mode, items}``; mode is prefix | exact | exclude | exclude_exact."""
    raw = (value or '').strip()
    if not raw:
        raise RdmaError('NCCL_IB_HCA is empty; list the HCAs (e.g. rocep1s0f1) or unset it')
    rest, exclude, exact = raw, False, False
    if rest.startswith('^'):
        exclude, rest = True, rest[1:]
    if rest.startswith('='):
        exact, rest = True, rest[1:]
    items = []
    for item in rest.split(','):
        item = item.strip()
        if not item or item[0] in '=^':
            raise RdmaError('NCCL_IB_HCA=%s: empty or misplaced item %r; use "[^][=]dev[:port],dev..."'
                            % (raw, item))
        entry = {'device': item}
        if ':' in item:
            dev, port = item.split(':', 1)
            if not dev or not port.isdigit():
                raise RdmaError('NCCL_IB_HCA=%s: bad port in %r; use dev:<number>' % (raw, item))
            entry = {'device': dev, 'port': int(port)}
        items.append(entry)
    mode = ('exclude_exact' if exact else 'exclude') if exclude else ('exact' if exact else 'prefix')
    return {'mode': mode, 'items': items}


def match_nccl_ib_hca(value, devices):
    """Devices (from ``devices``) the value selects, in PCI order."""
    spec = parse_nccl_ib_hca(value)
    exact = spec['mode'] in ('exact', 'exclude_exact')

    def hit(dev):
        return any(dev == i['device'] if exact else dev.startswith(i['device']) for i in spec['items'])
    chosen = [d for d in devices if hit(d) != spec['mode'].startswith('exclude')]
    return sorted(chosen, key=device_sort_key)


def expand_nccl_ib_hca(value, hcas):
    """``{devices, warnings}`` for a user value against one host's HCA facts (catalogue nccl_hca_prefix 'roce')."""
    names = [h['hca'] for h in hcas]
    devices = match_nccl_ib_hca(value, names)
    down = sorted((h['hca'] for h in hcas if h['hca'] in devices and h.get('state') != 'Up'), key=device_sort_key)
    warnings = []
    if down:
        warnings.append('NCCL_IB_HCA=%s also matches Down HCAs %s (Down ports are included implicitly); '
                        'list the Up HCAs explicitly' % (value, ', '.join(down)))
    return {'devices': devices, 'warnings': warnings}


def render_nccl_ib_hca(wanted, devices):
    """Comma list of ``wanted``; '=' (exact) when a plain prefix would also take another device."""
    wanted = sorted(wanted, key=device_sort_key)
    ambiguous = any(d.startswith(w) and d not in wanted for w in wanted for d in devices)
    return ('=' if ambiguous else '') + ','.join(wanted)


# ---------------------------------------------------------------------------------------------
# NCCL INFO lines (tests/fixtures/rdma/nccl-logs/spark-2node-dual-rail-healthy.log): what NCCL actually used, to compare with the rendered environment

_NCCL_PREFIX = re.compile(r'^(?P<host>[^:\s]+):\d+:\d+ \[\d+\] NCCL INFO (?P<msg>.*)$')
_NCCL_DEV = re.compile(r'\[(\d+)\](\S+?):(\d+)/(\w+)')


# No role calls the NCCL log rules yet: they classify a rank's NCCL_DEBUG=INFO output (catalogue nccl_hca_prefix)
# after the fact, which is the doctor's job (issue 17); kept here, unit-tested on the captured logs, for it.
def parse_nccl_log(text):
    """``{host: {ib_hca_env, devices: [{dev, port, link}], flags, oob: {ifname, ipv4}, gid_index}}``."""
    out = {}
    for line in text.splitlines():
        m = _NCCL_PREFIX.match(line.strip())
        if not m:
            continue
        rec = out.setdefault(m.group('host'), {})
        msg = m.group('msg')
        if msg.startswith('NCCL_IB_HCA set to '):
            rec['ib_hca_env'] = msg[len('NCCL_IB_HCA set to '):].strip()
        elif msg.startswith('NET/IB : Using '):
            body, _sep, oob = msg[len('NET/IB : Using '):].partition('; OOB ')
            rec['devices'] = [{'dev': d, 'port': int(p), 'link': k} for _i, d, p, k in _NCCL_DEV.findall(body)]
            rec['flags'] = re.findall(r'\[([A-Z]+)\]', body)
            name, _sep, rest = oob.partition(':')
            rec['oob'] = {'ifname': name.strip(), 'ipv4': rest.split('<', 1)[0].strip()}
        elif msg.startswith('NCCL_IB_GID_INDEX set by environment to '):
            rec['gid_index'] = int(msg.rsplit(' ', 1)[1].rstrip('.'))
    return out


def check_nccl_log(host, seen, env):
    """Differences between what NCCL logged on ``host`` and the environment rendered for it."""
    errors = []
    wanted = match_nccl_ib_hca(env['NCCL_IB_HCA'], [d['dev'] for d in seen.get('devices') or []]) \
        if env.get('NCCL_IB_HCA') else []
    used = [d['dev'] for d in seen.get('devices') or []]
    if sorted(used) != sorted(wanted):
        errors.append('%s: NCCL used %s, the environment selects %s' % (host, ','.join(used), ','.join(wanted)))
    oob = (seen.get('oob') or {})
    if oob and (oob.get('ifname'), oob.get('ipv4')) != (env.get('NCCL_SOCKET_IFNAME'), env.get('VLLM_HOST_IP')):
        errors.append('%s: NCCL bootstrap went over %s:%s, expected %s:%s' % (
            host, oob.get('ifname'), oob.get('ipv4'), env.get('NCCL_SOCKET_IFNAME'), env.get('VLLM_HOST_IP')))
    if 'gid_index' in seen and str(seen['gid_index']) != env.get('NCCL_IB_GID_INDEX'):
        errors.append('%s: NCCL used GID index %s, this host\'s table gives %s'
                      % (host, seen['gid_index'], env.get('NCCL_IB_GID_INDEX')))
    return errors


# ---------------------------------------------------------------------------------------------
# Topology and rendezvous (catalogue rendezvous_timeout, gloo_no_address, cma_zero; docs/rdma.md)

# Interfaces that are never a rendezvous path: container bridges repeat the same address on
# every host (docker0 172.17.0.1/16 in tests/fixtures/rdma/ip/unconfigured-spark-node-a.ip-br-addr.txt).
_NOT_RENDEZVOUS = re.compile(r'^(lo|docker\d*|br-.*|veth.*|virbr.*|cni.*|flannel.*|cali.*|tun.*|tap.*)$')


def fabric_candidates(facts, pin=None):
    """Up HCAs whose netdev is UP with a usable IPv4: ``[{hca, netdev, ipv4, cidr}]``.

    ``pin``: an ``ipaddress.IPv4Network`` (rdma_fabric_cidr); only addresses inside it count.
    """
    out = []
    for h in facts.get('hcas') or []:
        dev = (facts.get('netdevs') or {}).get(h['netdev'])
        if h.get('state') == 'Up' and h.get('ipv4') and (dev is None or netdev_is_up(dev)):
            if pin is None or ipaddress.IPv4Address(h['ipv4']) in pin:
                out.append(h)
    return out


def is_roce_netdev(facts, netdev):
    """An Ethernet netdev behind an HCA (RoCE), not IPoIB (``ib*`` / link_type infiniband,
    capture tests/fixtures/rdma/ibdev2netdev/mellanox-server-mixed-ib-eth.txt)."""
    dev = (facts.get('netdevs') or {}).get(netdev) or {}
    return dev.get('link_type', 'ether') != 'infiniband' and not re.match(r'^ib\d', netdev)


def parse_fabric_cidr(value):
    """``ipaddress.IPv4Network`` of the rdma_fabric_cidr pin, or None when empty; RdmaError otherwise."""
    if value in (None, ''):
        return None
    try:
        return ipaddress.IPv4Network(u'%s' % value, strict=True)
    except ValueError as e:
        raise RdmaError('rdma_fabric_cidr %r is not an IPv4 network in CIDR form (%s); write it as the fabric '
                        'subnet, e.g. 10.10.0.0/24 (host bits zero), or leave it empty to discover' % (value, e))


def rank_shared_subnets(hosts_facts, order, cands, shared):
    """Order the fabric subnets every rank shares, best first, each with the reason it ranks there.

    A sort by address alone lets any shared network win (an IPoIB or management subnet that happens
    to sort first). Preference: RoCE netdevs on every rank, then more Up HCA rails in the subnet,
    then not the subnet of a rank's host-name address (the management network), then address order.
    Returns ``[(cidr, {roce, rails, management, reason})]``.
    """
    ranked = []
    for c in shared:
        ends = [(h, x) for h in order for x in cands[h] if x['cidr'] == c]
        roce = all(any(is_roce_netdev(hosts_facts[h], x['netdev']) for hh, x in ends if hh == h) for h in order)
        rails = len(ends)
        net = ipaddress.IPv4Network(c)
        mgmt = sorted(h for h in order for a in hosts_facts[h].get('hostname_ipv4') or []
                      if _is_ipv4(a) and ipaddress.IPv4Address(a) in net)
        ranked.append((c, {'roce': roce, 'rails': rails, 'management': mgmt}))
    ranked.sort(key=lambda item: (not item[1]['roce'], -item[1]['rails'], bool(item[1]['management']),
                                  ipaddress.IPv4Network(item[0])))
    for i, (c, info) in enumerate(ranked):
        facts = ['RoCE netdevs on every rank' if info['roce'] else 'not RoCE on every rank (IPoIB)',
                 '%d Up HCA rail(s) across the ranks' % info['rails']]
        if info['management']:
            facts.append('host name of %s resolves into it (management)' % ', '.join(info['management']))
        info['reason'] = '; '.join(facts)
    return ranked


def _is_ipv4(value):
    try:
        ipaddress.IPv4Address(u'%s' % value)
        return True
    except ValueError:
        return False


def _host_subnets(facts, exclude_netdevs=()):
    """``{cidr: [(netdev, ipv4)]}`` for UP, non-bridge interfaces with a usable IPv4."""
    out = {}
    for name in sorted(facts.get('netdevs') or {}, key=device_sort_key):
        dev = facts['netdevs'][name]
        if name in exclude_netdevs or _NOT_RENDEZVOUS.match(name) or not netdev_is_up(dev):
            continue
        for a in dev.get('ipv4') or []:
            ip = ipaddress.IPv4Address(a['address'])
            if ip.is_loopback or ip.is_link_local:
                continue
            out.setdefault(a['cidr'], []).append((name, a['address']))
    return out


def _addr_in(cidr_list, ipv4):
    return any(ipaddress.IPv4Address(ipv4) in ipaddress.IPv4Network(c) for c in cidr_list)


def host_rendezvous(facts, cidr, interface=None):
    """``(netdev, ipv4)`` this host uses on the rendezvous subnet, or (None, None)."""
    for name, ip in _host_subnets(facts).get(cidr, []):
        if interface in (None, '', name):
            return name, ip
    return None, None


def host_nccl_hcas(facts, topology, fabric_cidrs):
    """This host's HCAs for NCCL_IB_HCA: Up, netdev UP, address inside the fabric subnets."""
    return [h for h in fabric_candidates(facts) if _addr_in(fabric_cidrs, h['ipv4'])]


def check_gid_index(host, facts, hca_names, index):
    """Errors for HCAs whose GID at ``index`` is not RoCE v2 + IPv4-mapped of its address (catalogue nccl_wrong_gid)."""
    by_name = dict((h['hca'], h) for h in facts.get('hcas') or [])
    errors = []
    for name in hca_names:
        h = by_name.get(name)
        if h is None:
            errors.append('%s %s: listed in NCCL_IB_HCA but not reported by ibdev2netdev; '
                          'remove it or check the cabling' % (host, name))
            continue
        table = dict((g['index'], g) for g in h.get('gids') or [])
        entry = table.get(index)
        if entry is None:
            errors.append('%s %s: GID index %s holds an all-zero GID (no address on %s); '
                          'give %s an address in the fabric or drop %s from NCCL_IB_HCA'
                          % (host, name, index, h['netdev'], h['netdev'], name))
        elif (entry.get('type') or '').strip() != 'RoCE v2' or gid_ipv4(entry['gid']) is None \
                or (h.get('ipv4') and gid_ipv4(entry['gid']) != h['ipv4']):
            errors.append('%s %s: GID index %s is %r (%s), not the RoCE v2 IPv4-mapped GID of %s; '
                          'use that HCA\'s own index (found %s)'
                          % (host, name, index, entry['gid'], entry.get('type'), h.get('ipv4'),
                             h.get('roce_v2_gid_index')))
    return errors


def _rank_order(hosts_facts, ranks):
    ranks = dict((h, int(r)) for h, r in (ranks or {}).items() if r is not None)
    return sorted(hosts_facts, key=lambda h: (ranks.get(h, 1 << 30), h))


def plan_fabric(hosts_facts, ranks=None, topology='auto', interface=None, mtu=9000,
                master_addr=None, platform='spark', check_hostname=True, fabric_cidr=None):
    """Classify the fabric across all ranks and choose the rendezvous network.

    ``hosts_facts``: ``{host: rdma_facts}``; ``ranks``: ``{host: rank}`` (rank 0 = head);
    ``fabric_cidr``: the operator's pin (rdma_fabric_cidr); discovery then looks only inside it.
    Returns a plan dict; ``errors`` (each naming host, item, fix) and ``warnings`` are lists;
    ``fabric_choice`` says which fabric subnet was chosen and why.
    """
    order = _rank_order(hosts_facts, ranks)
    if not order:
        raise RdmaError('no hosts given to the fabric plan')
    pin = parse_fabric_cidr(fabric_cidr)
    head = order[0]
    errors, warnings, info = [], [], []
    plan = {'topology': None, 'head': head, 'ranks': order, 'fabric_cidrs': [],
            'rendezvous': None, 'master_addr': None, 'links': [], 'same_index_links': [],
            'hosts': {}, 'errors': errors, 'warnings': warnings, 'info': info,
            'fabric_cidr_pin': str(pin) if pin else None, 'fabric_choice': None}

    cands = dict((h, fabric_candidates(hosts_facts[h], pin)) for h in order)
    bare = [h for h in order if not cands[h]]
    if pin is not None:
        for h in bare:
            outside = ['%s %s' % (x['netdev'], x['ipv4']) for x in fabric_candidates(hosts_facts[h])]
            if outside:
                errors.append('%s: no Up RoCE netdev has an address inside rdma_fabric_cidr %s (Up RoCE netdevs: '
                              '%s); address a fabric port inside %s, or correct rdma_fabric_cidr'
                              % (h, pin, ', '.join(outside), pin))
    bare_all = bare
    bare = [h for h in bare if not fabric_candidates(hosts_facts[h])]  # nothing at all, pin or not
    for h in bare:
        up = [x['hca'] for x in hosts_facts[h].get('hcas') or [] if x.get('state') == 'Up']
        # a port that holds its fabric address but went down (link or cable), named with its fix
        down = [x for x in hosts_facts[h].get('hcas') or [] if x.get('ipv4') and x.get('netdev')]
        errors.append('%s: no Up RoCE netdev with an IPv4 (Up HCAs: %s)%s; cable a fabric port and give '
                      'its netdev an address (169.254 autoconf does not count), then rerun'
                      % (h, ', '.join(up) or 'none',
                         ''.join('; %s ==> %s holds %s but is %s: bring it up (ip link set %s up) and check its '
                                 'cable' % (x['hca'], x['netdev'], x['ipv4'], x.get('operstate') or x.get('state')
                                            or 'down', x['netdev']) for x in down)))
    members = {}
    for h in order:
        for c in cands[h]:
            members.setdefault(c['cidr'], [])
            if h not in members[c['cidr']]:
                members[c['cidr']].append(h)
    shared = [c for c in sorted(members, key=ipaddress.IPv4Network) if len(members[c]) == len(order)]
    pairs_ok = all(any(a in m and b in m for m in members.values())
                   for i, a in enumerate(order) for b in order[i + 1:])

    if bare_all:
        kind = 'none'
    elif topology == 'single_subnet' or (topology == 'auto' and shared):
        kind = 'single_subnet'
        if not shared:
            best = max(members, key=lambda c: len(members[c])) if members else None
            missing = [h for h in order if best is None or h not in members[best]]
            errors.append('rdma_fabric_topology=single_subnet but no fabric subnet holds every rank: %s '
                          'has no address in %s; put every rank on one fabric subnet or use topology ring'
                          % (', '.join(missing), best))
    elif topology == 'ring' or pairs_ok:
        kind = 'ring'
        if not pairs_ok:
            for i, a in enumerate(order):
                for b in order[i + 1:]:
                    if not any(a in m and b in m for m in members.values()):
                        errors.append('%s and %s share no fabric subnet (no direct link); cable them '
                                      'p0<->p1 as in the ring playbook and address both ends in one subnet'
                                      % (a, b))
    else:
        kind = 'partial'
        for i, a in enumerate(order):
            for b in order[i + 1:]:
                if not any(a in m and b in m for m in members.values()):
                    errors.append('%s and %s share no fabric subnet; neither one shared subnet nor a '
                                  'complete ring: fix the cabling/addresses' % (a, b))
    plan['topology'] = kind
    if kind == 'single_subnet':
        ranked = rank_shared_subnets(hosts_facts, order, cands, shared)
        plan['fabric_cidrs'] = [ranked[0][0]] if ranked else []
        if ranked:
            cidr, why = ranked[0]
            if pin is not None:
                basis = 'pinned'
                reason = 'inside rdma_fabric_cidr %s; %s' % (pin, why['reason'])
            elif len(ranked) == 1:
                basis = 'only shared subnet'
                reason = 'the only Up RoCE subnet every rank shares; %s' % why['reason']
            else:
                def key(w):
                    return (w['roce'], w['rails'], bool(w['management']))
                tie = key(ranked[1][1]) == key(why)
                basis = 'address order (tie)' if tie else 'preferred'
                others = ', '.join('%s (%s)' % (c, w['reason']) for c, w in ranked[1:])
                reason = '%s; over %s%s' % (why['reason'], others,
                                            '; equal on every rule, the lower address wins' if tie else '')
            plan['fabric_choice'] = {'cidr': cidr, 'basis': basis, 'reason': reason,
                                     'considered': [c for c, _w in ranked]}
            if len(ranked) > 1 and pin is None:
                info.append('fabric subnet %s chosen among %s (%s); pin rdma_fabric_cidr to choose another'
                            % (cidr, ', '.join(c for c, _w in ranked), reason))
    elif kind == 'ring':
        plan['fabric_cidrs'] = sorted((c for c in members if len(members[c]) >= 2),
                                      key=ipaddress.IPv4Network)
        for c in plan['fabric_cidrs']:
            ends = []
            for h in members[c]:
                for x in cands[h]:
                    if x['cidr'] == c:
                        ends.append({'host': h, 'netdev': x['netdev'], 'hca': x['hca'], 'ipv4': x['ipv4']})
            link = {'subnet': c, 'ends': ends}
            plan['links'].append(link)
            idx = set(port_index(e['netdev']) for e in ends)
            if len(ends) == 2 and len(idx) == 1:
                pattern = 'p%d<->p%d' % (list(idx)[0], list(idx)[0])
                plan['same_index_links'].append(dict(link, pattern=pattern))
                warnings.append('link %s joins the same port index on both ends (%s %s <-> %s %s, %s); '
                                'recable p0<->p1 as in the ring playbook (NCCL_IB_SUBNET_AWARE_ROUTING=1 is set)'
                                % (c, ends[0]['host'], ends[0]['netdev'], ends[1]['host'], ends[1]['netdev'],
                                   pattern))
        if plan['fabric_cidrs']:
            plan['fabric_choice'] = {
                'cidr': None, 'basis': 'pinned' if pin is not None else 'ring links',
                'reason': 'ring: one subnet per cabled pair of Up RoCE netdevs%s'
                          % (' inside rdma_fabric_cidr %s' % pin if pin is not None else ''),
                'considered': list(plan['fabric_cidrs'])}

    _choose_rendezvous(plan, hosts_facts, order, interface, master_addr, errors)
    _host_checks(plan, hosts_facts, order, mtu, platform, interface, check_hostname)
    return plan


def _choose_rendezvous(plan, hosts_facts, order, interface, requested, errors):
    head = order[0]
    subnets = dict((h, _host_subnets(hosts_facts[h])) for h in order)
    common = [c for c in sorted(subnets[head], key=ipaddress.IPv4Network)
              if all(c in subnets[h] for h in order)]
    # one address on several hosts is a local bridge, not a shared L2
    common = [c for c in common
              if len(set(ip for h in order for _n, ip in subnets[h][c])) >= len(order)]
    if interface:
        common = [c for c in common if any(n == interface for n, _ip in subnets[head][c])]
    if plan['topology'] == 'single_subnet' and plan['fabric_cidrs']:
        preferred = [c for c in common if c in plan['fabric_cidrs']]
    else:
        # ring: TCPStore/Gloo go over the shared management L2 (catalogue rendezvous_timeout)
        preferred = [c for c in common if c not in plan['fabric_cidrs']]
    choice = (preferred or common or [None])[0]
    if requested:
        req_net = [c for c in common if ipaddress.IPv4Address(requested) in ipaddress.IPv4Network(c)]
        owner = [h for h in order for c in subnets[h] for _n, ip in subnets[h][c] if ip == requested]
        if not req_net or owner != [head]:
            unreach = [h for h in order if not any(ipaddress.IPv4Address(requested) in ipaddress.IPv4Network(c)
                                                   for c in subnets[h])]
            hint = ''
            if choice:
                hint = '; use %s (%s %s, a subnet every rank shares)' % (
                    host_rendezvous(hosts_facts[head], choice, interface)[1], head,
                    host_rendezvous(hosts_facts[head], choice, interface)[0])
            if owner != [head]:
                errors.append('master address %s is not an address of the head %s%s' % (requested, head, hint))
            else:
                errors.append('master address %s is not reachable from %s (no address in its subnet)%s'
                              % (requested, ', '.join(unreach), hint))
            choice = None
        else:
            choice = req_net[0]
    if choice is None and not any(e.startswith('master address') for e in errors):
        lacking = []
        for h in order:
            dev = (hosts_facts[h].get('netdevs') or {}).get(interface) if interface else None
            if interface and dev is None:
                lacking.append('%s (no interface %s)' % (h, interface))
            elif interface and (not netdev_is_up(dev) or usable_ipv4(dev) is None):
                lacking.append('%s (%s is %s, %s)' % (h, interface, dev.get('operstate') or 'unknown',
                                                      'no IPv4' if usable_ipv4(dev) is None else 'not UP'))
        errors.append('no subnet is shared by every rank to host the rendezvous (TCPStore/Gloo)%s; '
                      'give every rank an address on one common network (fabric or management)%s'
                      % (': ' + ', '.join(lacking) if lacking else ' among ' + ', '.join(order),
                         ' on %s' % interface if interface else ''))
        return
    if choice is None:
        return
    netdev, ip = host_rendezvous(hosts_facts[head], choice, interface)
    plan['rendezvous'] = {'cidr': choice, 'network': 'fabric' if choice in plan['fabric_cidrs'] else 'management',
                          'interface': interface or None}
    plan['master_addr'] = ip


# The sockets' subnet (GLOO/TP/NCCL_SOCKET_IFNAME, VLLM_HOST_IP): one interface, and the kernel's egress agrees with it
# (issue 30). Two UP interfaces with addresses in that subnet let the kernel answer a peer through the one the
# sockets are not bound to; a host route can send a peer out of the management port.
def socket_subnet_errors(host, facts, cidr, netdev, interface=None, rails=()):
    """Errors when another UP interface of this host holds an address in the sockets' subnet ``cidr`` and no
    interface is pinned (rdma_fabric_interface). ``netdev`` is the one the sockets use; ``rails``: the fabric netdevs
    NCCL uses (the plan's fabric_netdevs): when the sockets sit on one of them, the others are rails of one fabric
    subnet (the dual-rail twins of a port), not a stray address."""
    holders = (_host_subnets(facts).get(cidr) or [])
    allowed = set([netdev]) | (set(rails) if netdev in rails else set())
    others = [(n, ip) for n, ip in holders if n not in allowed]
    if not others or interface:
        return []
    names = sorted(set(n for n, _ip in holders), key=device_sort_key)
    return ['%s: %d UP interfaces hold addresses in the socket subnet %s (%s); the sockets use %s but the kernel may '
            'send a peer through %s. Fix: remove the extra address (%s), or pin rdma_fabric_interface: %s'
            % (host, len(names), cidr, ', '.join('%s %s' % (n, ip) for n, ip in holders), netdev,
               ', '.join(sorted(set(n for n, _ip in others))),
               '; '.join('ip addr del %s/%s dev %s' % (ip, cidr.split('/')[1], n) for n, ip in others), netdev)]


def parse_route_get(text):
    """``ip -j route get <address>`` -> {dst, dev, gateway, prefsrc} of the route the kernel picks (first entry)."""
    try:
        rows = json.loads(text or '')
    except ValueError as e:
        raise RdmaError('ip -j route get output is not JSON (%s): %r' % (e, (text or '')[:200]))
    if not isinstance(rows, list) or not rows or not isinstance(rows[0], dict) or not rows[0].get('dev'):
        raise RdmaError('ip -j route get printed no route with a device: %r' % (text or '')[:200])
    r = rows[0]
    return {'dst': r.get('dst'), 'dev': r['dev'], 'gateway': r.get('gateway'), 'prefsrc': r.get('prefsrc')}


def egress_errors(host, netdev, routes, rails=()):
    """Errors for each peer whose traffic the kernel sends out of another interface than ``netdev`` (the sockets')
    or, when the sockets sit on a fabric rail, another of ``rails`` (the plan's fabric_netdevs: dual-rail twins).
    ``routes``: [{peer, address, route: parse_route_get()}]. The fix names the route to remove."""
    allowed = set([netdev]) | (set(rails) if netdev in rails else set())
    out = []
    for r in routes or []:
        got = r['route']
        if got['dev'] in allowed:
            continue
        via = ' via %s' % got['gateway'] if got.get('gateway') else ''
        out.append('%s: the kernel sends %s (%s, rendezvous peer) out of %s%s, not the socket interface %s '
                   '(`ip route get %s`: dev %s%s%s): a route sends the peer elsewhere. Fix: find it with '
                   '`ip route show to match %s`, delete it (ip route del %s ...) and remove it from the netplan or '
                   'NetworkManager config that adds it'
                   % (host, r['peer'], r['address'], got['dev'], via, netdev, r['address'], got['dev'], via,
                      ' src %s' % got['prefsrc'] if got.get('prefsrc') else '', r['address'], r['address']))
    return out


def _host_checks(plan, hosts_facts, order, mtu, platform, interface, check_hostname=True):
    errors, info = plan['errors'], plan['info']
    mtus = []
    for h in order:
        facts = hosts_facts[h]
        view = {'rendezvous_netdev': None, 'rendezvous_ip': None, 'hcas': [], 'gid_index': None,
                'fabric_netdevs': [], 'errors': []}
        plan['hosts'][h] = view
        if interface:
            dev = (facts.get('netdevs') or {}).get(interface)
            if dev is None:
                view['errors'].append('%s: interface %s (rdma_fabric_interface) does not exist; unset the pin or '
                                      'name an interface of this host' % (h, interface))
            elif not netdev_is_up(dev) or usable_ipv4(dev) is None:
                view['errors'].append('%s: interface %s (rdma_fabric_interface) is %s with %s; GLOO/TP/NCCL '
                                      'sockets would fail with "Unable to find address" (catalogue gloo_no_address): bring it up with '
                                      'an IPv4 or pin the interface that holds the address'
                                      % (h, interface, dev.get('operstate') or 'unknown state',
                                         'no IPv4' if usable_ipv4(dev) is None else 'an IPv4'))
        if plan['rendezvous']:
            netdev, ip = host_rendezvous(facts, plan['rendezvous']['cidr'], interface)
            view['rendezvous_netdev'], view['rendezvous_ip'] = netdev, ip
            if netdev is None:
                view['errors'].append('%s: no UP interface with an address in the rendezvous subnet %s; '
                                      'address one' % (h, plan['rendezvous']['cidr']))
        hcas = host_nccl_hcas(facts, plan['topology'], plan['fabric_cidrs'])
        view['hcas'] = [x['hca'] for x in hcas]
        view['fabric_netdevs'] = sorted(set(x['netdev'] for x in hcas), key=device_sort_key)
        if view['rendezvous_netdev']:
            view['errors'].extend(socket_subnet_errors(h, facts, plan['rendezvous']['cidr'], view['rendezvous_netdev'],
                                                       interface, view['fabric_netdevs']))
        for x in hcas:
            mtus.append((h, x['netdev'], x.get('mtu')))
        if plan['topology'] == 'single_subnet' and hcas:
            idx = sorted(set(x.get('roce_v2_gid_index') for x in hcas), key=lambda v: (v is None, v))
            if idx == [None] or None in idx:
                missing = [x['hca'] for x in hcas if x.get('roce_v2_gid_index') is None]
                msg = ('%s: no RoCE v2 GID for the fabric address on %s; check `show_gids` / the sysfs GID '
                       'table and that the netdev holds its IPv4 (catalogue nccl_wrong_gid)' % (h, ', '.join(missing)))
                if platform == 'spark':
                    view['errors'].append(msg)
                else:
                    info.append(msg + ' [informational on %s lanes]' % platform)
                view['gid_index'] = None
            elif len(idx) > 1:
                view['errors'].append('%s: the HCAs in NCCL_IB_HCA need different GID indexes (%s); one '
                                      'NCCL_IB_GID_INDEX cannot serve them: readdress so they match or keep one rail'
                                      % (h, ', '.join('%s=%s' % (x['hca'], x['roce_v2_gid_index']) for x in hcas)))
            else:
                view['gid_index'] = idx[0]
                view['errors'].extend(check_gid_index(h, facts, view['hcas'], idx[0]))
        resolved = facts.get('hostname_ipv4') or []
        if check_hostname and resolved and is_loopback_address(resolved[0]):
            view['errors'].append('%s: host name %s resolves to %s (loopback), so Gloo/TCPStore can bind to '
                                  'loopback and peers get "Connection refused" (catalogue gloo_fullmesh): map %s to %s in /etc/hosts '
                                  'instead of %s' % (h, facts.get('hostname'), resolved[0], facts.get('hostname'),
                                                     view['rendezvous_ip'] or 'its rendezvous address', resolved[0]))
        cma = facts.get('cma_total_kib')
        if cma == 0:
            msg = ('%s: CmaTotal is 0 kB on kernel %s; ibv_reg_mr fails with ENOMEM (catalogue cma_zero): boot a kernel with '
                   'CMA (e.g. 6.17.0-1031-nvidia)' % (h, facts.get('kernel') or 'unknown'))
            if platform == 'spark':
                view['errors'].append(msg)
            else:
                info.append(msg + ' [informational on %s lanes]' % platform)
    if plan['topology'] == 'single_subnet':
        lens = set(len(plan['hosts'][h]['hcas']) for h in order)
        if len(lens) > 1:
            errors.append('NCCL_IB_HCA lists differ in length across ranks without subnet-aware routing (%s); '
                          'NCCL pairs devices by index: give every rank the same number of fabric HCAs'
                          % '; '.join('%s=%s' % (h, ','.join(plan['hosts'][h]['hcas'])) for h in order))
    if mtus:
        values = set(m[2] for m in mtus)
        if len(values) > 1 or (mtu and values != set([mtu])):
            known = [v for v in values if v is not None]
            target = mtu or (max(known) if known else None)
            # Name only the offenders, each with its value and the target; the others are fine.
            bad = [m for m in mtus if m[2] != target]
            errors.append('fabric MTU must be %s on every rank: %s. Fix: %s, persist it (netplan/nmcli) and '
                          'check with `ping -M do -s %d <peer>`'
                          % (target, ', '.join('%s %s has MTU %s (want %s)'
                                               % (h, n, 'unknown' if v is None else v, target) for h, n, v in bad),
                             '; '.join('on %s: ip link set dev %s mtu %s' % (h, n, target) for h, n, v in bad),
                             (target or 1500) - 28))
    plan['mtus'] = dict(('%s %s' % (h, n), m) for h, n, m in mtus)


# ---------------------------------------------------------------------------------------------
# The NCCL/Gloo environment of one host (docs/lanes.md; docs/rdma.md)

DERIVED_KEYS = ('NCCL_IB_HCA', 'NCCL_IB_GID_INDEX', 'NCCL_IB_ADDR_RANGE', 'NCCL_SOCKET_IFNAME',
                'GLOO_SOCKET_IFNAME', 'TP_SOCKET_IFNAME', 'MN_IF_NAME', 'VLLM_HOST_IP',
                'NCCL_IB_SUBNET_AWARE_ROUTING')

# Fixed keys of the seed lanes' NCCL blocks (docs/lanes.md): T2/T4 single subnet, Y3 TRANSPORT=ib.
FIXED_SINGLE_SUBNET = {
    'NCCL_NET': 'IB', 'NCCL_IB_DISABLE': '0', 'NCCL_IB_ROCE_VERSION_NUM': '2',
    'NCCL_IB_ADDR_FAMILY': 'AF_INET', 'NCCL_NVLS_ENABLE': '0', 'NCCL_CROSS_NIC': '0',
    'NCCL_IB_MERGE_NICS': '0', 'NCCL_CUMEM_ENABLE': '0', 'NCCL_IGNORE_CPU_AFFINITY': '1',
    'NCCL_DEBUG': 'WARN',
}
FIXED_RING = dict(FIXED_SINGLE_SUBNET, NCCL_NET_PLUGIN='none')


def nccl_env(facts, plan, host=None, fixed=None, overrides=None):
    """The env map of one host from its own facts and the cluster plan.

    ``fixed``: the fixed NCCL keys (None = the seed block of docs/lanes.md for the plan's topology);
    ``overrides``: the lane's ``nccl`` block, merged over ``fixed`` (a null value drops the key).
    Raises RdmaError when the plan or this host cannot produce a working environment.
    """
    if not plan or plan.get('errors'):
        raise RdmaError('the fabric plan has errors: %s' % '; '.join((plan or {}).get('errors') or ['no plan']))
    topo = plan['topology']
    if topo not in ('single_subnet', 'ring'):
        raise RdmaError('no NCCL environment for topology %r' % topo)
    if fixed is None:
        fixed = FIXED_RING if topo == 'ring' else FIXED_SINGLE_SUBNET
    fixed = dict(fixed)
    for key, value in (overrides or {}).items():
        if value is None:
            fixed.pop(key, None)
        else:
            fixed[key] = value
    clash = sorted(k for k in fixed if k in DERIVED_KEYS)
    if clash:
        raise RdmaError('the lane sets %s, which must come from each host\'s own facts (catalogue gloo_no_address); remove them '
                        'from the lane\'s nccl block' % ', '.join(clash))
    who = host or 'this host'
    interface = (plan.get('rendezvous') or {}).get('interface')
    netdev, ip = host_rendezvous(facts, plan['rendezvous']['cidr'], interface)
    if netdev is None:
        raise RdmaError('%s: no UP interface holds an address in the rendezvous subnet %s; address one'
                        % (who, plan['rendezvous']['cidr']))
    hcas = host_nccl_hcas(facts, topo, plan['fabric_cidrs'])
    if not hcas:
        raise RdmaError('%s: no Up HCA with an address in %s; cable and address a fabric port'
                        % (who, ', '.join(plan['fabric_cidrs'])))
    env = dict((k, str(v)) for k, v in fixed.items())
    names = [h['hca'] for h in facts.get('hcas') or []]
    env['NCCL_IB_HCA'] = render_nccl_ib_hca([h['hca'] for h in hcas], names)
    if topo == 'single_subnet':
        env['NCCL_IB_ADDR_RANGE'] = plan['fabric_cidrs'][0]
        idx = set(h.get('roce_v2_gid_index') for h in hcas)
        if len(idx) == 1 and None not in idx:
            env['NCCL_IB_GID_INDEX'] = str(idx.pop())  # never an empty value (catalogue nccl_wrong_gid)
    else:
        env['NCCL_IB_SUBNET_AWARE_ROUTING'] = '1'  # pairwise links, one subnet per link (catalogue cma_zero, rendezvous_timeout)
    for key in ('NCCL_SOCKET_IFNAME', 'GLOO_SOCKET_IFNAME', 'TP_SOCKET_IFNAME', 'MN_IF_NAME'):
        env[key] = netdev
    env['VLLM_HOST_IP'] = ip
    return env


# ---------------------------------------------------------------------------------------------
# Persisting the fabric in netplan (DGX OS): a reboot must not bring back MTU 1500 (catalogue fabric_mtu_mismatch)

NETPLAN_FILE = '90-dgxspark-vllm-fabric.yaml'


def netplan_fabric(facts, netdevs, mtu, addresses=False):
    """The netplan v2 document that keeps this host's fabric netdevs at ``mtu`` bytes across a reboot.

    ``netdevs``: the host's fabric netdevs (plan ``hosts[h].fabric_netdevs``). With ``addresses`` each netdev also
    keeps the IPv4 addresses it holds now (loopback and 169.254 autoconf left out), so a hand-set ring address
    survives as well. netplan merges this file over earlier ones (the name sorts late); keys it does not set stay
    as the other files say. Raises RdmaError when there is nothing to persist or the MTU is not a jumbo-capable value.
    """
    if not netdevs:
        raise RdmaError('no fabric netdev on this host to persist')
    if isinstance(mtu, bool) or not isinstance(mtu, int) or not 1280 <= mtu <= 9216:
        raise RdmaError('fabric MTU %r to persist is not an Ethernet MTU in 1280..9216 bytes (rdma_fabric_mtu)' % (mtu,))
    ethernets = {}
    for name in sorted(set(netdevs), key=device_sort_key):
        dev = (facts.get('netdevs') or {}).get(name)
        if dev is None:
            raise RdmaError('fabric netdev %s is not among the host\'s netdevs' % name)
        entry = {'mtu': mtu}
        if addresses:
            kept = []
            for a in dev.get('ipv4') or []:
                ip = ipaddress.IPv4Address(a['address'])
                if not ip.is_loopback and not ip.is_link_local:
                    kept.append('%s/%d' % (a['address'], a['prefixlen']))
            if not kept:
                raise RdmaError('fabric netdev %s holds no IPv4 to persist (rdma_fabric_netplan_addresses)' % name)
            entry['addresses'] = kept
        ethernets[name] = entry
    return {'network': {'version': 2, 'ethernets': ethernets}}
