# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
import hashlib

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter import weights as f


def test_full_hash_filter_messages():
    a, b = hashlib.sha256(b"a").hexdigest(), hashlib.sha256(b"b").hexdigest()
    owner = {"checkpoint/model-00001-of-00002.safetensors": a}
    assert f.weights_full_hash_problems(dict(owner), owner, "spark-sim-1", "spark-sim-0") == []
    assert f.weights_full_hash_problems({"checkpoint/model-00001-of-00002.safetensors": b}, owner, "spark-sim-1",
                                        "spark-sim-0") == [
        "spark-sim-1: checkpoint model-00001-of-00002.safetensors: sha256 expected %s, found %s; fix: its size matches "
        "the owner's spark-sim-0 but its bytes do not: delete it on spark-sim-1 and run model_weights again (the copy "
        "takes it from the owner)" % (a, b)]
    with pytest.raises(AnsibleFilterError, match="expected two mappings"):
        f.weights_full_hash_problems([], owner, "n", "o")
