#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: node_facts
short_description: Read the memory, GPU, disk, swap, name-resolution, docker-runtime and OOM-killer facts of a node
version_added: 0.1.0
description:
  - Reads C(/proc/meminfo) (MemTotal, MemAvailable, MemFree, swap, CmaTotal), the NVIDIA driver version and GPU
    names from C(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader) (falling back to the
    plain C(nvidia-smi) table), the driver's CUDA version from the table's header (C(CUDA Version), field case
    catalogue image_cuda_newer_than_driver), free disk space at the given paths, a few C(vm.*) sysctls, the OS and kernel, the deploy user's groups
    and what the node's host name resolves to.
  - On GB10 C(nvidia-smi) prints memory totals as C([N/A]) (unified memory, no framebuffer; capture
    tests/fixtures/node/gb10-query-name-memory-total-driver.csv), so every memory figure comes from
    C(/proc/meminfo). GiB means 1024^3 bytes.
  - Read-only; returns the fact C(preflight_node). The verdicts are made on the controller by the
    C(dgxspark.vllm.node_preflight_checks) and C(dgxspark.vllm.node_utilization_verdict) filters.
author:
  - dgxspark.vllm maintainers (@dgxspark)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - dgxspark.vllm.attributes.idempotent
  - dgxspark.vllm.attributes.read_only
attributes:
  platform:
    platforms: posix
options:
  meminfo_path:
    description: File in C(/proc/meminfo) format.
    type: path
    default: /proc/meminfo
  sysctl_root:
    description: Directory holding C(vm/swappiness) and friends (the C(/proc/sys) tree).
    type: path
    default: /proc/sys
  os_release_path:
    description: File in C(os-release) format.
    type: path
    default: /etc/os-release
  nvidia_smi:
    description:
      - Name or path of C(nvidia-smi). When it is not found, the driver and GPU facts are V(null) (fine on
        C(cpu) lanes; the C(spark) lane asserts fail on it).
    type: str
    default: nvidia-smi
  disk_paths:
    description:
      - Paths whose free space to report. A path that does not exist yet is measured at its nearest existing
        parent directory, reported as C(probe).
    type: list
    elements: path
    default: []
  proc_root:
    description: The C(/proc) tree whose C(<pid>/comm) files name the running processes (userspace OOM killers).
    type: path
    default: /proc
  etc_root:
    description:
      - The root the userspace OOM killers' configuration files are read under (C(/etc/default/earlyoom), nohang's
        config); C(/) on a node, a fixture tree in tests.
    type: path
    default: /
  docker_bin:
    description:
      - Docker CLI whose C(docker info) lists the daemon's runtimes (C(docker_runtimes), catalogue nvidia_runtime_missing). Run as the
        module's user; when it fails, C(docker_runtimes) is V(null) and C(docker_runtimes_error) says why.
    type: str
    default: docker
  deploy_user:
    description:
      - User that runs docker and the ranks; its supplementary groups are read from the group database
        (what a fresh login gets, catalogue docker_group_missing). Omit to skip.
    type: str
notes:
  - Host name resolution uses the system resolver (C(getaddrinfo)), the same call Gloo makes; the first address
    returned decides (catalogue gloo_fullmesh).
"""

EXAMPLES = r"""
- name: Read node facts
  dgxspark.vllm.node_facts:
    disk_paths:
      - /var/tmp/models/tiny-glm
      - /var/lib/docker
    deploy_user: spark
  register: _facts

- name: Publish them
  ansible.builtin.set_fact:
    preflight_node: "{{ _facts.node }}"
"""

RETURN = r"""
node:
  description: The node's facts. GiB figures are rounded to 2 decimals; the C(*_kib) figures are exact.
  returned: always
  type: dict
  sample:
    hostname: spark-sim-0
    kernel: 6.17.0-1031-nvidia
    os: {id: ubuntu, version_id: "24.04", pretty_name: Ubuntu 24.04.4 LTS}
    mem_total_gib: 121.69
    mem_available_gib: 104.46
    mem_free_gib: 99.1
    mem_total_kib: 127602768
    mem_available_kib: 109533184
    mem_free_kib: 103914291
    swap_total_gib: 16.0
    swap_used_gib: 0.0
    cma_total_kib: 65536
    nvidia_smi_found: true
    driver_version: 580.126.09
    cuda_version: "13.0"
    gpu_name: NVIDIA GB10
    gpu_names: [NVIDIA GB10]
    gpu_memory_total: null
    disk:
      /var/tmp/models/tiny-glm: {probe: /var/tmp, device: 2049, free_gib: 79.1}
    sysctl: {vm.swappiness: 0, vm.min_free_kbytes: 67584, vm.watermark_boost_factor: 15000}
    deploy_user: spark
    deploy_user_groups: [spark, sudo]
    deploy_user_in_docker_group: false
    hostname_resolution: {hostname: spark-sim-0, addresses: [198.18.10.10], loopback: false}
    docker_runtimes: [io.containerd.runc.v2, io.containerd.runtime.v1.linux, nvidia, runc]
    docker_runtimes_error: ""
    oom_killers: []
    oom_floors: []
"""

import grp
import os
import pwd
import socket

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxspark.vllm.plugins.module_utils.oom_floors import read_killer_floors
from ansible_collections.dgxspark.vllm.plugins.module_utils.node_checks import (
    BYTES_PER_GIB,
    NodeCheckError,
    hostname_verdict,
    kib_to_gib,
    parse_docker_runtimes,
    read_oom_killers,
    parse_meminfo,
    parse_nvidia_smi_csv,
    parse_nvidia_smi_table,
)
from ansible_collections.dgxspark.vllm.plugins.module_utils.space import probe_path

NVSMI_FIELDS = ["name", "memory.total", "driver_version"]
SYSCTLS = ["vm.swappiness", "vm.min_free_kbytes", "vm.watermark_boost_factor"]


def _read(path):
    with open(path, "r") as f:
        return f.read()


def read_os_release(path):
    out = {"id": None, "version_id": None, "pretty_name": None}
    try:
        text = _read(path)
    except (IOError, OSError):
        return out
    for line in text.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            k = k.strip().lower()
            if k in out:
                out[k] = v.strip().strip('"')
    return out


def read_sysctls(root):
    out = {}
    for name in SYSCTLS:
        try:
            raw = _read(os.path.join(root, *name.split("."))).strip()
        except (IOError, OSError):
            out[name] = None
            continue
        out[name] = int(raw) if raw.lstrip("-").isdigit() else raw
    return out


def probe_disk(path):
    """Free space at path (its nearest existing parent): space.probe_path, in GiB."""
    got = probe_path(path)
    return {"probe": got["probe"], "device": got["device"],
            "free_gib": round(got["free_bytes"] / float(BYTES_PER_GIB), 2)}


def user_groups(user):
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return None
    names = []
    try:
        names.append(grp.getgrgid(pw.pw_gid).gr_name)
    except KeyError:
        names.append(str(pw.pw_gid))
    for g in grp.getgrall():
        if user in g.gr_mem and g.gr_name not in names:
            names.append(g.gr_name)
    return names


def resolve_hostname(hostname):
    try:
        infos = socket.getaddrinfo(hostname, None, 0, socket.SOCK_STREAM)
    except socket.gaierror:
        return []
    addrs = []
    for info in infos:
        a = info[4][0]
        if a not in addrs:
            addrs.append(a)
    return addrs


def gpu_facts(module, nvidia_smi):
    out = {"nvidia_smi_found": False, "driver_version": None, "gpu_name": None, "gpu_names": [],
           "gpu_memory_total": None, "cuda_version": None}
    exe = module.get_bin_path(nvidia_smi) if "/" not in nvidia_smi else (
        nvidia_smi if os.access(nvidia_smi, os.X_OK) else None)
    if not exe:
        return out
    out["nvidia_smi_found"] = True
    env = {"LANG": "C", "LC_ALL": "C"}
    rc, stdout, stderr = module.run_command(
        [exe, "--query-gpu=" + ",".join(NVSMI_FIELDS), "--format=csv,noheader"], environ_update=env)
    rows = []
    if rc == 0:
        try:
            rows = parse_nvidia_smi_csv(stdout, NVSMI_FIELDS)
        except NodeCheckError:
            rows = []
    if rows:
        out["gpu_names"] = [r["name"] for r in rows if r.get("name")]
        out["driver_version"] = rows[0].get("driver_version")
        out["gpu_memory_total"] = rows[0].get("memory.total")
    # the table's header is the only place that names the newest CUDA the driver supports (catalogue image_cuda_newer_than_driver)
    rc, stdout, stderr = module.run_command([exe], environ_update=env)
    if rc == 0:
        table = parse_nvidia_smi_table(stdout)
        out["cuda_version"] = table["cuda_version"]
        if not rows:
            out["driver_version"] = table["driver_version"]
            out["gpu_names"] = [g["name"] for g in table["gpus"]]
    out["gpu_name"] = out["gpu_names"][0] if out["gpu_names"] else None
    return out


def docker_runtimes(module, docker_bin):
    """(runtime names, error): the daemon's registered runtimes (catalogue nvidia_runtime_missing), or (None, why)."""
    exe = module.get_bin_path(docker_bin) if "/" not in docker_bin else (
        docker_bin if os.access(docker_bin, os.X_OK) else None)
    if not exe:
        return None, "%s not found" % docker_bin
    rc, stdout, stderr = module.run_command([exe, "info", "--format", "{{json .Runtimes}}"],
                                            environ_update={"LANG": "C", "LC_ALL": "C"})
    if rc != 0:
        return None, (stderr or stdout).strip()[:300]
    try:
        return parse_docker_runtimes(stdout.strip()), ""
    except NodeCheckError as e:
        return None, str(e)


def gather(module):
    p = module.params
    try:
        mem = parse_meminfo(_read(p["meminfo_path"]))
    except (IOError, OSError) as e:
        module.fail_json(msg="cannot read %s: %s" % (p["meminfo_path"], e))
    for key in ("MemTotal", "MemAvailable", "MemFree"):
        if key not in mem:
            module.fail_json(msg="%s has no %s line; cannot judge memory (catalogue free_memory_refused, min_free_kbytes_raised)" % (p["meminfo_path"], key))
    swap_total, swap_free = mem.get("SwapTotal", 0), mem.get("SwapFree", 0)
    hostname = socket.gethostname()
    node = {
        "hostname": hostname,
        "kernel": os.uname()[2],
        "os": read_os_release(p["os_release_path"]),
        "mem_total_kib": mem["MemTotal"],
        "mem_available_kib": mem["MemAvailable"],
        "mem_free_kib": mem["MemFree"],
        "mem_total_gib": kib_to_gib(mem["MemTotal"]),
        "mem_available_gib": kib_to_gib(mem["MemAvailable"]),
        "mem_free_gib": kib_to_gib(mem["MemFree"]),
        "swap_total_gib": kib_to_gib(swap_total),
        "swap_used_gib": kib_to_gib(swap_total - swap_free),
        # absent on kernels built without CMA: reported as null, judged like 0 on spark lanes (catalogue cma_zero)
        "cma_total_kib": mem.get("CmaTotal"),
        "sysctl": read_sysctls(p["sysctl_root"]),
        "disk": dict((path, probe_disk(path)) for path in p["disk_paths"]),
        "hostname_resolution": hostname_verdict(hostname, resolve_hostname(hostname)),
        "deploy_user": p["deploy_user"],
        "deploy_user_groups": None,
        "deploy_user_in_docker_group": None,
    }
    node.update(gpu_facts(module, p["nvidia_smi"]))
    node["docker_runtimes"], node["docker_runtimes_error"] = docker_runtimes(module, p["docker_bin"])
    node["oom_killers"] = read_oom_killers(p["proc_root"])
    # earlyoom's and nohang's effective floors, judged against the memory plan by preflight (module_utils/oom_floors.py)
    node["oom_floors"] = read_killer_floors(kib_to_gib(mem["MemTotal"]), p["proc_root"], p["etc_root"])
    if p["deploy_user"]:
        groups = user_groups(p["deploy_user"])
        node["deploy_user_groups"] = groups
        node["deploy_user_in_docker_group"] = groups is not None and "docker" in groups
    return node


def main():
    module = AnsibleModule(
        argument_spec=dict(
            meminfo_path=dict(type="path", default="/proc/meminfo"),
            sysctl_root=dict(type="path", default="/proc/sys"),
            os_release_path=dict(type="path", default="/etc/os-release"),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            disk_paths=dict(type="list", elements="path", default=[]),
            deploy_user=dict(type="str"),
            proc_root=dict(type="path", default="/proc"),
            etc_root=dict(type="path", default="/"),
            docker_bin=dict(type="str", default="docker"),
        ),
        supports_check_mode=True,
    )
    module.exit_json(changed=False, node=gather(module))


if __name__ == "__main__":
    main()
