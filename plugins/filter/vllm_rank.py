# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Filters of the vllm_ranks role: render a rank, compare a group, decide a group restart (module_utils)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils.docker_rank import group_restart, listen_argv, port_guard_errors
from ansible_collections.dgxspark.vllm.plugins.module_utils.model_limits import max_model_len_errors
from ansible_collections.dgxspark.vllm.plugins.module_utils.render import (
    RenderError,
    api_key_fingerprint,
    group_errors,
    kv_pin_warning,
    render_rank,
)


def _plain(value):
    """Ansible hands tagged str/dict subclasses; the renderer wants plain data."""
    if isinstance(value, dict):
        return dict((str(k), _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def vllm_rank_spec(lane, host, hostname=None):
    try:
        return render_rank(_plain(lane), _plain(host))
    except RenderError as e:
        raise AnsibleFilterError("vllm_rank_spec%s: %s" % (" (host %s)" % hostname if hostname else "", e))
    except (KeyError, TypeError) as e:
        raise AnsibleFilterError("vllm_rank_spec%s: the lane is incomplete (%s); validate it with preflight"
                                 % (" (host %s)" % hostname if hostname else "", e))


def vllm_rank_group_errors(specs):
    if not isinstance(specs, dict):
        raise AnsibleFilterError("vllm_rank_group_errors: expected a mapping host -> spec, got %s" % type(specs).__name__)
    return group_errors(_plain(specs))


def vllm_rank_group_restart(ranks, force=False, restart_on_change=True):
    if not isinstance(ranks, dict):
        raise AnsibleFilterError("vllm_rank_group_restart: expected a mapping host -> rank state, got %s"
                                 % type(ranks).__name__)
    return group_restart(_plain(ranks), bool(force), bool(restart_on_change))


def vllm_api_key_fingerprint(key):
    """Salted PBKDF2 fingerprint of vllm_api_key for the spec hash; the message of an error never holds the key."""
    try:
        return api_key_fingerprint(_plain(key))
    except RenderError as e:
        raise AnsibleFilterError("vllm_api_key_fingerprint: %s" % e)


def vllm_kv_pin_warning(log_text, pin_bytes):
    return kv_pin_warning(pin_bytes, log_text) or ""


def vllm_rank_listen_argv(port):
    try:
        return listen_argv(port)
    except (TypeError, ValueError):
        raise AnsibleFilterError("vllm_rank_listen_argv: port %r is not a number" % (port,))


def vllm_rank_port_guard_errors(listeners, host):
    if not isinstance(listeners, list):
        raise AnsibleFilterError("vllm_rank_port_guard_errors: expected a list of {key, port, stdout}, got %s"
                                 % type(listeners).__name__)
    try:
        return port_guard_errors(str(host), _plain(listeners))
    except (KeyError, TypeError, ValueError) as e:
        raise AnsibleFilterError("vllm_rank_port_guard_errors: each item needs key, port and stdout (%s)" % e)


# vllm_kv_pin_warning is public for lane authors (docs/lanes.md: the pin skips the activation reserve); no role calls it.
def vllm_rank_max_model_len_errors(config, max_model_len, host, path, env=None):
    """The checkpoint's config.json (a mapping) against the lane's serve.max_model_len (module_utils/model_limits.py)."""
    if not isinstance(config, dict):
        raise AnsibleFilterError("vllm_rank_max_model_len_errors: %s: %s is not a JSON object" % (host, path))
    if max_model_len is not None and (isinstance(max_model_len, bool) or not isinstance(max_model_len, int)):
        raise AnsibleFilterError("vllm_rank_max_model_len_errors: max_model_len must be an integer, got %r"
                                 % (max_model_len,))
    return max_model_len_errors(str(host), str(path), _plain(config), max_model_len, _plain(env) or {})


class FilterModule(object):
    def filters(self):
        return {
            "vllm_rank_spec": vllm_rank_spec,
            "vllm_rank_group_errors": vllm_rank_group_errors,
            "vllm_rank_group_restart": vllm_rank_group_restart,
            "vllm_kv_pin_warning": vllm_kv_pin_warning,
            "vllm_api_key_fingerprint": vllm_api_key_fingerprint,
            "vllm_rank_listen_argv": vllm_rank_listen_argv,
            "vllm_rank_port_guard_errors": vllm_rank_port_guard_errors,
            "vllm_rank_max_model_len_errors": vllm_rank_max_model_len_errors,
        }
