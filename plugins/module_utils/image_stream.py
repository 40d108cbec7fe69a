# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""The node-to-node image stream behind the image_stream module (stdlib only, runs on the head).

One `docker save`, one compressor, the same bytes written to one `ssh peer 'decompress |
docker load'` per target at once (catalogue image_differs fan-out). Several processes must run
concurrently with their pipes joined, which run_command cannot do, hence subprocess here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import threading
import time

COMPRESSORS = {
    "zstd": (["zstd", "-q", "-T0", "-c", "-{level}"], "zstd -q -d -c"),
    "gzip": (["gzip", "-c", "-{level}"], "gzip -d -c"),
    "none": (None, "cat"),
}


def write_progress(path, state):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.rename(tmp, path)


class Fanout(object):
    def __init__(self, procs):
        self.procs = procs  # host -> Popen
        self.errors = {}
        self.compressed = 0

    def write(self, data):
        self.compressed += len(data)
        for host, proc in self.procs.items():
            if host in self.errors:
                continue
            try:
                proc.stdin.write(data)
            except (IOError, OSError) as exc:
                self.errors[host] = "stream to %s broke: %s" % (host, exc)
        if len(self.errors) == len(self.procs):
            raise IOError("every target failed")

    def close(self):
        for proc in self.procs.values():
            try:
                proc.stdin.close()
            except (IOError, OSError):
                pass


def stream_image(docker, image, targets, ssh_key, known_hosts, compress, compress_level,
                 remote_docker, progress_file, chunk_bytes, total):
    """Run the stream; returns (result, save_rc, save_err, failure). result has bytes,
    compressed_bytes, seconds and targets (host -> 'ok' or the error seen)."""
    hosts = [t["host"] for t in targets]
    result = dict(bytes=0, compressed_bytes=0, seconds=0.0, targets=dict((h, "pending") for h in hosts))
    comp_argv, decomp = COMPRESSORS[compress]
    remote = "%s | %s load" % (decomp, remote_docker)

    procs = {}
    stderr_files = {}
    for t in targets:
        argv = ["ssh", "-i", ssh_key, "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                "-o", "ControlPath=none", "-o", "StrictHostKeyChecking=yes",
                "-o", "UserKnownHostsFile=" + known_hosts, "-o", "ConnectTimeout=15",
                "-o", "ServerAliveInterval=15", "-o", "Compression=no",
                "%s@%s" % (t["user"], t["address"]), remote]
        errf = open(progress_file + "." + t["host"] + ".err", "w+")
        stderr_files[t["host"]] = errf
        procs[t["host"]] = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=errf, stderr=errf)

    fan = Fanout(procs)
    save = subprocess.Popen([docker, "save", image], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    comp = None
    if comp_argv:
        argv = [a.replace("{level}", str(compress_level)) for a in comp_argv]
        comp = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    counters = {"raw": 0, "failure": None}
    start = time.time()

    def pump_raw():
        try:
            sink = comp.stdin if comp else None
            while True:
                chunk = save.stdout.read(chunk_bytes)
                if not chunk:
                    break
                counters["raw"] += len(chunk)
                if sink is not None:
                    sink.write(chunk)
                else:
                    fan.write(chunk)
            if sink is not None:
                sink.close()
        except Exception as exc:  # a dead pipe anywhere ends the transfer; reported below
            counters["failure"] = str(exc)
            save.kill()
            if comp:
                comp.kill()

    def pump_comp():
        try:
            while True:
                chunk = comp.stdout.read(chunk_bytes)
                if not chunk:
                    break
                fan.write(chunk)
        except Exception as exc:
            counters["failure"] = str(exc)
            save.kill()

    threads = [threading.Thread(target=pump_raw)]
    if comp:
        threads.append(threading.Thread(target=pump_comp))
    for th in threads:
        th.daemon = True
        th.start()

    def progress(done):
        elapsed = max(time.time() - start, 1e-6)
        rate = counters["raw"] / elapsed
        remaining = max(total - counters["raw"], 0)
        write_progress(progress_file, {
            "image": image, "done": done, "elapsed_s": round(elapsed, 1),
            "bytes": counters["raw"], "total_bytes": total, "compressed_bytes": fan.compressed,
            "rate_bytes_s": int(rate), "eta_s": int(remaining / rate) if rate > 0 and not done else 0,
            "targets": dict((h, fan.errors.get(h, result["targets"][h] if done else "streaming")) for h in hosts),
        })

    while any(th.is_alive() for th in threads):
        progress(False)
        for th in threads:
            th.join(timeout=5)
    fan.close()
    save_rc = save.wait()
    save_err = save.stderr.read().decode("utf-8", "replace").strip()
    if comp:
        comp.wait()
    for host, proc in procs.items():
        rc = proc.wait()
        errf = stderr_files[host]
        errf.seek(0)
        text = errf.read().strip()
        errf.close()
        if host in fan.errors or rc != 0:
            result["targets"][host] = "%s (rc %s): %s" % (fan.errors.get(host, "docker load failed"), rc, text[-500:])
        else:
            result["targets"][host] = "ok"
    result.update(bytes=counters["raw"], compressed_bytes=fan.compressed, seconds=round(time.time() - start, 1))
    progress(True)
    return result, save_rc, save_err, counters["failure"]
