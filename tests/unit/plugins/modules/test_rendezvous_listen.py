"""rendezvous_listen on real sockets of this machine (loopback): the inputs are real TCP connections."""
import errno
import socket
import threading
import time

from ansible_collections.dgxspark.vllm.plugins.modules import rendezvous_listen
from tests.unit.plugins.modules.utils import run_module


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _connect_when_listening(port, count, source="127.0.0.1"):
    """Connect `count` times (from `source`) once the listener accepts; each retry waits 50 ms."""
    def run():
        done = 0
        deadline = time.time() + 10
        while done < count and time.time() < deadline:
            c = socket.socket()
            c.bind((source, 0))
            try:
                c.connect(("127.0.0.1", port))
                done += 1
            except OSError:
                time.sleep(0.05)
            finally:
                c.close()
    t = threading.Thread(target=run)
    t.start()
    return t


def test_records_the_source_address_of_every_worker_and_stops_at_the_count():
    port = _free_port()
    t = _connect_when_listening(port, 1, "127.0.0.1")
    t2 = _connect_when_listening(port, 1, "127.0.0.2")
    start = time.time()
    result = rendezvous_listen.listen("127.0.0.1", port, 2, 10)
    t.join()
    t2.join()
    assert result["bound"] is True
    assert sorted(result["peers"]) == ["127.0.0.1", "127.0.0.2"]
    assert time.time() - start < 9  # returned at the count, not at the timeout
    # nothing is left listening
    probe = socket.socket()
    assert probe.connect_ex(("127.0.0.1", port)) == errno.ECONNREFUSED
    probe.close()


def test_a_missing_worker_leaves_the_peers_short_after_the_timeout():
    port = _free_port()
    t = _connect_when_listening(port, 1)
    result = rendezvous_listen.listen("127.0.0.1", port, 2, 1.0)
    t.join()
    assert result == {"bound": True, "peers": ["127.0.0.1"]}


def test_a_taken_port_is_errno_98_not_a_failure():
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        result = rendezvous_listen.listen("127.0.0.1", holder.getsockname()[1], 1, 1)
    finally:
        holder.close()
    assert result["bound"] is False and result["errno"] == errno.EADDRINUSE == 98
    assert "in use" in result["error"] and result["peers"] == []


def test_an_address_not_on_this_node_is_errno_99():
    # 198.18.255.254: a test-network address that no interface of this machine carries
    result = rendezvous_listen.listen("198.18.255.254", _free_port(), 1, 1)
    assert result["bound"] is False and result["errno"] == errno.EADDRNOTAVAIL == 99


def test_module_returns_the_listener_result_and_refuses_a_bad_port():
    port = _free_port()
    result, failed = run_module(rendezvous_listen.main, {"address": "127.0.0.1", "port": port, "peers": 0,
                                                         "timeout": 1})
    assert not failed and result == {"changed": False, "bound": True, "peers": []}
    result, failed = run_module(rendezvous_listen.main, {"address": "127.0.0.1", "port": 70000, "peers": 1})
    assert failed and "70000 is not a TCP port" in result["msg"] and "serve.master_port" in result["msg"]
