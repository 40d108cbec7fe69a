# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Inventory checks that need no lane and no node (controller side, pure Python).

Run by playbooks/controller_checks.yml before any connection: the spark_cluster group exists and has
hosts, no two hosts share one SSH address (in any spelling), the collection's variables are spelled as
its roles declare them, and secrets pass inputs.secret_problem. The rank layout against the lane's
tensor-parallel size is lane.validate_inventory.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import re

from ansible_collections.dgxspark.vllm.plugins.module_utils.inputs import secret_problem

try:
    import netaddr
    HAS_NETADDR = True
except ImportError:  # requirements.txt installs it (ansible.utils' ipaddr filters need it too)
    HAS_NETADDR = False

# Prefixes of the collection's own variables: its roles' names and the collection-wide vllm_*.
NAMESPACE_PREFIXES = ("image_sync_", "kernel_fix_", "model_weights_", "node_prep_", "preflight_", "rdma_fabric_",
                      "sim_fleet_", "tp_pad_", "vllm_")
# Variables the playbooks themselves read (no role declares them).
PLAYBOOK_VARIABLES = ("vllm_teardown_confirm", "sim_fleet_interfaces", "sim_fleet_nodes", "sim_fleet_head")
# Secrets: passed to nodes as single tokens (an HTTP header, a file of one line).
SECRET_VARIABLES = ("vllm_api_key", "model_weights_hf_token")

_LEADING_ZERO_V4 = re.compile(r"^(\d{1,3}\.){3}\d{1,3}$")


def address_key(address):
    """One spelling of an SSH address: IPs canonical (IPv4-mapped IPv6 as IPv4), names lowercase, no final dot.

    Returns (key, problem): problem is a message fragment when the spelling is ambiguous, else None.
    """
    text = str(address).strip()
    host = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if "%" in host:
        # a zone id names an interface of this controller; ssh takes it, the head's URLs (http://<host>:<port>) do not
        return host.lower(), ("is an IPv6 address with a zone id (%%%s): the zone names one machine's interface, "
                              "and the URLs built from the head's ansible_host cannot carry it. Give the node's "
                              "routable address (IPv4 or global IPv6) or its host name" % host.split("%", 1)[1])
    host = host.lower().rstrip(".")
    if _LEADING_ZERO_V4.match(host) and any(len(p) > 1 and p.startswith("0") for p in host.split(".")):
        return host, ("has a leading zero in an octet, which ssh's resolver may read as octal; write it without "
                      "leading zeros, e.g. %s" % ".".join(str(int(p)) for p in host.split(".")))
    if HAS_NETADDR:
        try:
            ip = netaddr.IPAddress(host, flags=netaddr.INET_PTON) if "." in host and ":" not in host \
                else netaddr.IPAddress(host)
        except (netaddr.AddrFormatError, ValueError, TypeError):
            return host, None
        if ip.version == 6 and ip.is_ipv4_mapped():
            ip = ip.ipv4()
        return str(ip), None
    return host, None


def address_errors(hosts):
    """hosts: [{name, address, port}] -> errors for ambiguous spellings and addresses shared by two hosts."""
    errors = []
    seen = {}
    for host in hosts:
        key, problem = address_key(host.get("address") if host.get("address") not in (None, "") else host["name"])
        if problem:
            errors.append("host %s: ansible_host %s %s" % (host["name"], host.get("address"), problem))
        port = host.get("port")
        port = 22 if port in (None, "") else str(port)
        seen.setdefault((key, str(port)), []).append(host)
    for (key, port), same in sorted(seen.items()):
        if len(same) > 1:
            names = ", ".join("%s (%s)" % (h["name"], h.get("address") or h["name"]) for h in same)
            errors.append("hosts %s: one node at address %s port %s; every rank needs its own node. Give each host "
                          "its own ansible_host, or remove the duplicate" % (names, key, port))
    return errors


def variable_errors(host, names, known):
    """Variables of the collection's namespace that no role declares, with difflib's closest known names."""
    errors = []
    vocabulary = sorted(set(known) | set(PLAYBOOK_VARIABLES))
    for name in sorted(set(names)):
        if not str(name).startswith(NAMESPACE_PREFIXES) or name in vocabulary:
            continue
        close = difflib.get_close_matches(name, vocabulary, n=1, cutoff=0.75)
        fix = ("did you mean %s?" % close[0]) if close else \
            "no role of dgxspark.vllm declares it (see the roles' meta/argument_specs.yml)."
        errors.append("host %s: variable %s is unknown; %s Rename or remove it (it would be ignored)"
                      % (host, name, fix))
    return errors


def secret_errors(host, secrets):
    """secrets: {name: value}, checked by inputs.secret_problem (the modules' rule); the value is never shown."""
    errors = []
    for name in sorted(secrets):
        problem = secret_problem(name, secrets[name])
        if problem:
            errors.append("host %s: %s" % (host, problem))
    return errors


def inventory_problems(hosts, known, group="spark_cluster", sources=None, refused=None):
    """All controller-side inventory errors.

    hosts: [{name, address, port, variables (names), secrets ({name: value})}] of group; known: declared names;
    refused: what the shape_guard inventory plugin found (it left those sources empty, so they come alone).
    """
    if refused:
        return [str(r) for r in refused]
    if not hosts:
        return ["the inventory (%s) has no host in group %s: it did not parse (see Ansible's warnings above) or "
                "defines no %s group. Check it with: ansible-inventory -i <inventory> --graph %s"
                % (", ".join(sources or []) or "none given", group, group, group)]
    errors = address_errors(hosts)
    for host in hosts:
        errors += variable_errors(host["name"], host.get("variables") or [], known)
        errors += secret_errors(host["name"], host.get("secrets") or {})
    return errors
