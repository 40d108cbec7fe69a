# -*- coding: utf-8 -*-
# Copyright (c) dgxspark.vllm contributors
# SPDX-License-Identifier: MIT
"""Controller-side checks for image_sync and kernel_fix (logic in module_utils/image.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils.image import (
    ImageError,
    apply_fix_pins,
    check_build_chain,
    check_expected_digest,
    check_expected_packages,
    check_fix_image,
    check_fix_in_container,
    check_fix_mounts,
    check_fix_source,
    compare_fingerprints,
    cuda_driver_problems,
    fix_file_path,
    fix_file_report,
    compare_identity,
    hosts_needing_image,
    pick_peer_address,
)
from ansible_collections.dgxspark.vllm.plugins.module_utils.kinds import check as _kind_check
from ansible_collections.dgxspark.vllm.plugins.module_utils.space import image_space_problems as _image_space_problems


def _mapping(value, what):
    if not isinstance(value, dict):
        raise AnsibleFilterError("%s: expected a mapping host -> result, got %s" % (what, type(value).__name__))
    return value


def image_fingerprint_compare(per_host, reference_host, expected=None):
    try:
        return compare_fingerprints(_mapping(per_host, "image_fingerprint_compare"), reference_host, expected)
    except ImageError as exc:
        raise AnsibleFilterError(str(exc))


def image_digest_pin_errors(per_host, reference_host, reference, expected_digest=None):
    try:
        return check_expected_digest(_mapping(per_host, "image_digest_pin_errors"), reference_host, reference,
                                     expected_digest)
    except ImageError as exc:
        raise AnsibleFilterError(str(exc))


def image_identity(per_host, reference_host, reference):
    try:
        return compare_identity(_mapping(per_host, "image_identity"), reference_host, reference)
    except ImageError as exc:
        raise AnsibleFilterError(str(exc))


def image_package_pin_errors(per_host, reference, expected=None):
    return check_expected_packages(_mapping(per_host, "image_package_pin_errors"), reference, expected or {})


def image_build_chain_errors(stages, texts, reference):
    if not isinstance(stages, list) or not isinstance(texts, list):
        raise AnsibleFilterError("image_build_chain_errors: expected the list of stages and the list of their "
                                 "Dockerfile texts")
    return check_build_chain(stages, texts, reference)


def image_hosts_needing(per_host, reference_host):
    return hosts_needing_image(_mapping(per_host, "image_hosts_needing"), reference_host)


def kernel_fix_source_errors(item, actual_sha256, content, lane_name="?"):
    return check_fix_source(item, actual_sha256 or None, content, lane_name)


def kernel_fix_image_check(item, probe, image_ref, host="?", peer_host=None, peer_probe=None):
    if not isinstance(probe, dict):
        raise AnsibleFilterError("kernel_fix_image_check: expected the image_fingerprint result of the node, got %s"
                                 % type(probe).__name__)
    return check_fix_image(item, probe, image_ref, host, peer_host, peer_probe)


def kernel_fix_mount_errors(mounts, expected, host="?"):
    return check_fix_mounts(mounts, expected, host)


def kernel_fix_container_drift(sha256sum_text, fix_files, host="?"):
    return check_fix_in_container(sha256sum_text, fix_files, host)


def image_peer_address(peer_ipv4s, local_cidrs, avoid=None):
    return pick_peer_address(peer_ipv4s, local_cidrs, avoid)


def image_space_problems(per_host, reference_host, targets, mode, reference, margin_gib, registry_dir=None,
                         lane_size_gib=None):
    try:
        return _image_space_problems(_mapping(per_host, "image_space_problems"), reference_host, list(targets or []),
                                     mode, reference, margin_gib, registry_dir, lane_size_gib)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("image_space_problems: %s" % exc)


def image_cuda_problems(per_host, nodes, reference, lane_cuda_version=None):
    try:
        return cuda_driver_problems(_mapping(per_host, "image_cuda_problems"), nodes or {}, reference,
                                    lane_cuda_version)
    except ImageError as exc:
        raise AnsibleFilterError(str(exc))


def kernel_fix_pins(lane, pins):
    """{lane, errors}: the lane with the user's vllm_fix_file_sha256 pins set on the files it leaves to the user."""
    lane_out, errors = apply_fix_pins(_mapping(lane, "kernel_fix_pins"), pins, _kind_check)
    return {"lane": lane_out, "errors": errors}


def kernel_fix_report(lane, artifacts_dir, collection_root, user_pins=None):
    return fix_file_report(_mapping(lane, "kernel_fix_report"), artifacts_dir, collection_root, user_pins=user_pins)


def kernel_fix_source_path(src, artifacts_dir, collection_root):
    return fix_file_path(src, artifacts_dir, collection_root)


class FilterModule(object):
    def filters(self):
        return {
            "image_fingerprint_compare": image_fingerprint_compare,
            "image_hosts_needing": image_hosts_needing,
            "image_digest_pin_errors": image_digest_pin_errors,
            "image_identity": image_identity,
            "image_package_pin_errors": image_package_pin_errors,
            "image_build_chain_errors": image_build_chain_errors,
            "kernel_fix_source_errors": kernel_fix_source_errors,
            "kernel_fix_pins": kernel_fix_pins,
            "kernel_fix_report": kernel_fix_report,
            "kernel_fix_source_path": kernel_fix_source_path,
            "kernel_fix_image_check": kernel_fix_image_check,
            "kernel_fix_mount_errors": kernel_fix_mount_errors,
            "kernel_fix_container_drift": kernel_fix_container_drift,
            "image_peer_address": image_peer_address,
            "image_space_problems": image_space_problems,
            "image_cuda_problems": image_cuda_problems,
        }
