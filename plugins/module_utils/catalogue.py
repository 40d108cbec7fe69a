# -*- coding: utf-8 -*-
# Copyright: contributors to dgxspark.vllm
# SPDX-License-Identifier: MIT
"""The failure catalogue: pure data, no logic (the classifier is diagnose.py).

One list of dicts, loaded by node-side modules (AnsiballZ ships module_utils), by filters on the
controller and by the head's watchdog (plain Python, stdlib only). docs/catalogue.md is generated
from it (tools/catalogue_doc.py); tests/unit/plugins/module_utils/test_catalogue.py proves every
entry matches a captured input and none matches the healthy captures.

Entry keys:
  id       stable name; messages and docs cite it as "catalogue: <id>"
  class    reason class (health.REASON_CLASSES lists them)
  title    one line
  matchers any of:
    log      regexes over rank container logs (current and saved)
    kernel   regexes over kernel lines (dmesg, journalctl -k): Xid, NVRM, the OOM killer, mlx5
    journal  regexes over the system journal (userspace OOM killers, docker)
    api      regexes over an HTTP answer of the endpoint
    exit     dict the stopped container must equal in every key (exit_code, oom_killed)
    state    list of {fact, op, value}: op present | eq | gt | lt on a node fact
             (diagnose.node_facts derives the facts from the collected evidence)
  generic  true for a catch-all: it ranks below every specific match
  supersedes  ids of entries this one replaces when both match (the same symptom, a more precise cause): the
           classifier drops them, so their fix is not offered beside this one
  cause    what went wrong
  fix      what to do
  source   public material the lesson comes from (facts only)
  refs     older citation labels that now point here (field case Fnn, gotcha G#n, spec section)
"""

CATALOGUE = [
    # ---------------------------------------------------------------- the node itself
    {
        "id": "node_unreachable",
        "class": "node_state",
        "title": "a node does not answer over SSH",
        "matchers": {"state": [{"fact": "node_unreachable", "op": "present"}]},
        "cause": "Ansible could not open an SSH session to the node: a wrong management address or port in the "
                 "inventory, a user that does not exist there, a key that is not in its authorized_keys, sshd "
                 "stopped, or the node is down or rebooting. Nothing can be read from or run on it.",
        "fix": "Check the node's ansible_host and ansible_port (its management address), ansible_user, the key "
               "(ansible_ssh_private_key_file or your ssh-agent) and that sshd runs (console or BMC); then "
               "`ansible -i <your inventory> <node> -m ansible.builtin.ping` must answer pong before a re-run.",
        "source": ["Ansible's connection error of a node whose sshd was stopped (tests/e2e/faults, "
                   "test_ssh_unreachable_worker): ssh: connect to host <address> port 22: Connection refused"],
        "refs": [],
    },
    # ---------------------------------------------------------------- memory at startup
    {
        "id": "free_memory_refused",
        "class": "free_memory_check",
        "title": "vLLM refuses to start: free memory below gpu_memory_utilization",
        "matchers": {"log": [r"Free memory on device \S+ \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is "
                             r"less than desired GPU memory utilization \((?P<util>[\d.]+), (?P<desired>[\d.]+) GiB\)"]},
        "cause": "On unified memory the page cache and other processes hold memory vLLM counts as used, so the "
                 "startup check finds less free memory than gpu_memory_utilization asks for.",
        "fix": "Drop the page cache before each rank starts (node_prep settle), stop other GPU users, or lower "
               "serve.gpu_memory_utilization to what the tightest node can reach.",
        "source": ["tonyd2wild/GLM-5.3-Flash-NVFP4-DFlash2-2x-DGX-Spark docs/OPEN-PROBLEMS.md #6",
                   "tonyd2wild/GLM-5.3-Flash-NVFP4-1M-KV-4x-DGX-Spark runbook"],
        "refs": ["F17", "G#8"],
    },
    {
        "id": "engine_memory_held",
        "class": "free_memory_check",
        "title": "a relaunch found memory held by a leftover engine process",
        "matchers": {"state": [{"fact": "engine_memory_held", "op": "present"}]},
        "supersedes": ["free_memory_refused"],
        "cause": "Engine processes of an earlier group (VLLM::EngineCore, VLLM::Worker_TP*, vllm serve) still run "
                 "on the node after its rank stopped and hold its memory, so MemAvailable did not come back and the "
                 "relaunch found too little free memory: the memory is held, not short.",
        "fix": "Free the holder the evidence names: stop it (kill <pid>; kill -9 when it does not exit, or remove "
               "the container it runs in), or reboot the node when it does not go; then re-run site.yml, which "
               "tears every rank down and relaunches workers first. Leave gpu_memory_utilization as it is.",
        "source": ["a GB10 vLLM log's nvidia-smi process table (sample S05): VLLM::EngineCore 61383MiB while "
                   "memory.used reads [N/A]",
                   "spark-arena/sparkrun issue #141 (processes left holding ~95 GB of unified memory)"],
        "refs": [],
    },
    {
        "id": "min_free_kbytes_raised",
        "class": "free_memory_check",
        "title": "vm.min_free_kbytes raised before launch",
        "matchers": {"state": [{"fact": "vm.min_free_kbytes", "op": "gt", "value": 1048576}]},
        "cause": "A large vm.min_free_kbytes reserve is subtracted from what vLLM sees as available, so every "
                 "rank fails the startup free-memory check.",
        "fix": "Leave vm.min_free_kbytes at the distribution default until the group serves; remove the sysctl.d "
               "drop-in that raised it and run sysctl --system.",
        "source": ["GLM-5.3-Flash TP2 field report (DGX Spark pair): min_free_kbytes cost 6.2 GiB of MemAvailable"],
        "refs": ["F19", "G#9"],
    },
    {
        "id": "kv_cache_too_small",
        "class": "free_memory_check",
        "title": "KV cache too small for --max-model-len",
        "matchers": {"log": [r"To serve at least one request with the model's max seq len \((?P<max_seq_len>\d+)\), "
                             r"(?P<needed>[\d.]+) GiB KV cache is needed.*available (?P<available>[\d.]+) GiB"]},
        "cause": "The KV pool (pinned or profiled) cannot hold one request of max_model_len tokens; a drafter "
                 "padded to 36/9 at TP3 lands here too (it falls back to block size 16).",
        "fix": "Raise the KV pin or lower serve.max_model_len (the KV pin formula in docs/memory-plan.md); at TP3 pad the "
               "DFlash2 drafter to 48/12 (drafter_pad).",
        "source": ["yalindogusahin/glm53-flash-nvfp4-tp3 results/dflash2-tp3-2026-08-28.md",
                   "sfxnz/GLM-5.3-Flash-NVFP4-vLLM-2x-DGX-Spark README (3.0 GiB cannot boot 327680)"],
        "refs": ["G#30", "G#34", "G#31"],
    },
    {
        "id": "negative_cuda_graph_estimate",
        "class": "out_of_memory",
        "title": "negative CUDA-graph memory estimate inflates the KV pool",
        "matchers": {"log": [r"Estimated CUDA graph memory: -[\d.]+ GiB"]},
        "cause": "On unified memory cudaMemGetInfo is not monotonic; the graph-capture estimate comes out "
                 "negative and is subtracted, so the KV pool is sized larger than memory allows.",
        "fix": "Pin --kv-cache-memory to the value the same log suggests and prove it with a >= 28K-token prompt.",
        "source": ["vllm-project/vllm issue #44740", "vllm-project/vllm PR #46932", "NVIDIA/NemoClaw issue #7127"],
        "refs": ["G10"],
    },
    {
        "id": "kv_pin_no_activation_reserve",
        "class": "out_of_memory",
        "title": "a pinned --kv-cache-memory leaves no activation reserve",
        "matchers": {"state": [{"fact": "kv_pin_large_batch", "op": "present"}]},
        "cause": "A pinned --kv-cache-memory removes the activation reserve the profiler would keep; with a large "
                 "--max-num-batched-tokens the rank boots, answers short prompts, then runs out of memory on the "
                 "first long prefill.",
        "fix": "Use the pin vLLM suggests (or the lane's), keep --max-num-batched-tokens at 8192 or less with a "
               "pin, and accept a lane only after the long-prompt gate (vllm_bench).",
        "source": ["tonyd2wild/GLM-5.3-Flash-NVFP4-DFlash2-2x-DGX-Spark docs/OPEN-PROBLEMS.md #5"],
        "refs": ["F20", "G#12", "G#11"],
    },
    {
        "id": "nvrm_no_memory",
        "class": "out_of_memory",
        "title": "NVRM out of memory (page cache starving the driver)",
        "matchers": {"kernel": [r"NVRM: .*NV_ERR_NO_MEMORY"], "log": [r"NV_ERR_NO_MEMORY"]},
        "cause": "The GPU driver could not allocate: on GB10 the page cache competes with the driver for the "
                 "same memory, so the same command boots or fails at random.",
        "fix": "Drop caches before launch and run the flusher during boot (node_prep); with a pinned KV keep "
               "--max-num-batched-tokens <= 8192 at TP2.",
        "source": ["tonyd2wild/GLM-5.3-Flash-NVFP4-1M-KV-4x-DGX-Spark docs/GB10-KV-MEMORY-LADDER.md"],
        "refs": ["G#7", "I.6"],
    },
    {
        "id": "cuda_oom",
        "class": "out_of_memory",
        "title": "CUDA or host allocation failed",
        "matchers": {"log": [r"CUDA out of memory|OutOfMemoryError|Cannot allocate memory|std::bad_alloc|"
                             r"MemoryError\b"]},
        "cause": "An allocation failed inside the rank: the KV pin, gpu_memory_utilization or another process "
                 "leaves too little memory on this node.",
        "fix": "Lower serve.gpu_memory_utilization or the KV pin, or free memory on the node, then restart the "
               "whole group.",
        "source": ["tonyd2wild/GLM-5.3-Flash-NVFP4-1M-KV-4x-DGX-Spark docs/GB10-KV-MEMORY-LADDER.md"],
        "refs": [],
    },
    {
        "id": "setstorage_out_of_bounds",
        "class": "out_of_memory",
        "title": "padded drafter view larger than its storage",
        "matchers": {"log": [r"requiring a storage size of (?P<required>\d+) are out of bounds for storage of size "
                             r"(?P<available>\d+)"]},
        "cause": "A padded drafter's tensor view asks for more bytes than its storage holds: the drafter on "
                 "disk does not match the padding the model code expects.",
        "fix": "Re-run drafter_pad (tp_pad) so the drafter carries the 48/12 layout and its _tp3_head_pad record.",
        "source": ["yalindogusahin/glm53-flash-nvfp4-tp3 scripts/pad-dflash2-drafter.py"],
        "refs": [],
    },
    {
        "id": "oom_killed",
        "class": "out_of_memory",
        "title": "the kernel OOM killer stopped the rank",
        "matchers": {"exit": {"oom_killed": True},
                     "kernel": [r"(?i:out of memory): Killed process \d+ \((?!cicc\))[^)]*\)|oom-kill:.*task=(?!cicc,)"]},
        "cause": "The kernel's OOM killer ended the rank (docker reports OOMKilled, or the kernel log names the "
                 "process); with swap off the worker has no valve during the MoE repack.",
        "fix": "Keep a swap area with vm.swappiness=0 (node_prep), drop caches before launch, and lower the "
               "memory the lane asks for.",
        "source": ["tonyd2wild/GLM-5.3-Flash-NVFP4-DFlash2-2x-DGX-Spark README (swap on, swappiness 0)"],
        "refs": ["G#6"],
    },
    {
        "id": "jit_compiler_oom",
        "class": "out_of_memory",
        "title": "JIT compiler storm: the OOM killer takes cicc",
        "matchers": {"kernel": [r"(?i:out of memory): Killed process \d+ \(cicc\)|oom-kill:.*task=cicc,"]},
        "cause": "Many parallel nvcc/cicc jobs during the post-load profile exhausted memory.",
        "fix": "Set MAX_JOBS=2 and FLASHINFER_NVCC_THREADS=1 in the rank environment and keep the JIT caches "
               "on persistent mounts so the compile happens once.",
        "source": ["Stars1233/GLM-5.3-Flash-NVFP4-2x-DGX-Spark docs/SPEED-NIGHT-2026-09-18.md"],
        "refs": ["G#10"],
    },
    {
        "id": "userspace_oom_killer",
        "class": "out_of_memory",
        "title": "a userspace OOM killer (systemd-oomd, earlyoom, Ray) ended the rank",
        "matchers": {"journal": [r"systemd-oomd\[\d+\]: Killed \S+ due to memory (?:used|pressure)|"
                                 r"earlyoom\[\d+\]: .*(?:sending SIG(?:TERM|KILL)|killing process)",
                                 r"Task was killed due to the node running low on memory"]},
        "cause": "A userspace memory monitor killed the rank from outside. earlyoom and nohang send SIGTERM first, so "
                 "the rank exits 143 (128 + SIGTERM) with OOMKilled false, 137 only when the monitor goes on to "
                 "SIGKILL; on unified memory its floor trips during weight load.",
        "fix": "Exclude the rank containers from systemd-oomd/earlyoom or disable them on serving nodes, or set "
               "the killer's floor below the free memory the plan predicts at peak (preflight compares the two); "
               "on Ray lanes set RAY_memory_usage_threshold=0.99.",
        "source": ["localaiguyy/GLM-5.3-Flash-NVFP4-3x-DGX-Spark docs/CHANGES-REQUIRED.md (Ray memory monitor)"],
        "refs": ["G#44"],
    },
    # ---------------------------------------------------------------- node memory state
    {
        "id": "swap_off",
        "class": "node_state",
        "title": "no swap on the node",
        "matchers": {"state": [{"fact": "swap_missing", "op": "present"}]},
        "cause": "With swap fully off the worker is killed during the MoE Marlin repack: there is no valve.",
        "fix": "Create a swap file and keep vm.swappiness=0 persisted in /etc/sysctl.d (node_prep does both).",
        "source": ["tonyd2wild/GLM-5.3-Flash-NVFP4-DFlash2-2x-DGX-Spark README (swap on with swappiness 0)"],
        "refs": [],
    },
    {
        "id": "uvm_livelock",
        "class": "hang",
        "title": "shard load frozen: swap paging triggers a UVM livelock",
        "matchers": {"log": [r"No available shared memory broadcast block found in \d+ seconds?"]},
        "cause": "With swap active and swappiness above 0 the kernel pages vLLM out mid-load; the UVM driver "
                 "livelocks (a worker thread at 100 % CPU, GPU busy at idle power) and the ranks stop talking.",
        "fix": "Set vm.swappiness=0 persistently (node_prep), tear the group down and relaunch; a node that "
               "dropped off SSH needs a reboot.",
        "source": ["tonyd2wild/GLM-5.3-Flash-NVFP4-DFlash2-2x-DGX-Spark docs/OPEN-PROBLEMS.md #4",
                   "tonyd2wild/GLM-5.3-Flash-NVFP4-1M-KV-4x-DGX-Spark docs/TOPK doc (graphs freeze)"],
        "refs": ["G#5", "G#29"],
    },
    {
        "id": "cma_zero",
        "class": "node_state",
        "title": "CmaTotal 0 kB: memory registration fails",
        "matchers": {"state": [{"fact": "cma_total_kib", "op": "eq", "value": 0}],
                     "log": [r"ibv_reg_mr\w* failed.*(?:Cannot allocate memory|ENOMEM|errno 12)"]},
        "cause": "The running kernel exposes no contiguous memory area, so RDMA memory registration fails even "
                 "for 1 KB.",
        "fix": "Boot a kernel whose /proc/meminfo shows a non-zero CmaTotal (6.17.0-1031-nvidia with driver "
               "580.173.02 worked in the report).",
        "source": ["luxingcom/aicad-nccl-optimization issue #1"],
        "refs": ["F07"],
    },
    # ---------------------------------------------------------------- rendezvous and NCCL
    {
        "id": "gloo_no_address",
        "class": "collective_init",
        "title": "Gloo/TP socket interface has no address",
        "matchers": {"log": [r"Unable to find address for: (?P<ifname>\S+)"]},
        "cause": "GLOO_SOCKET_IFNAME/TP_SOCKET_IFNAME name an interface that has no IPv4 on this node.",
        "fix": "Let rdma_fabric derive the socket interface per host from the address it holds; never set one "
               "interface name for every host.",
        "source": ["MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark issue #4", "vllm-project/vllm PR #40991"],
        "refs": ["F06"],
    },
    {
        "id": "gloo_fullmesh",
        "class": "collective_init",
        "title": "Gloo full mesh refused: a rank advertised loopback or a firewall drops it",
        "matchers": {"log": [r"Gloo connectFullMesh failed.*remote=\[(?P<remote>[^\]]+)\]"]},
        "cause": "A rank's host name resolves to a loopback address, or a firewall drops the rendezvous port, so "
                 "the peers cannot connect.",
        "fix": "Set VLLM_HOST_IP and GLOO_SOCKET_IFNAME per host (rdma_fabric), fix /etc/hosts, open the master "
               "port between the ranks.",
        "source": ["vllm-project/vllm issue #31377", "NVIDIA/dgx-spark-playbooks nvidia/vllm/README.md"],
        "refs": ["F26"],
    },
    {
        "id": "loopback_fallback",
        "class": "collective_init",
        "title": "host name resolves to loopback",
        "matchers": {"log": [r"Using the loopback address as fallback"]},
        "generic": True,
        "cause": "The host name maps to 127.0.1.1 in /etc/hosts, so torch falls back to loopback and peers "
                 "cannot reach this rank.",
        "fix": "Set GLOO_SOCKET_IFNAME and VLLM_HOST_IP explicitly (rdma_fabric does it per host).",
        "source": ["vllm-project/vllm issue #31377"],
        "refs": [],
    },
    {
        "id": "rendezvous_timeout",
        "class": "collective_init",
        "title": "a rank could not reach the rendezvous (TCPStore)",
        "matchers": {"log": [r"DistNetworkError|TCPStore|The client socket has timed out|"
                             r"Connection refused.*(?:master|store)|DistStoreError|"
                             r"Timed out (?:waiting|after).*(?:rank|peers|store)"]},
        "cause": "The rank could not reach the master address and port, or met a stale or dying peer: no "
                 "address every rank can reach, a firewall, or a teardown that left one rank behind.",
        "fix": "Tear down every rank, then relaunch workers first and the head last (vllm_ranks); rendezvous on "
               "an address every rank shares (the management network on a triangle).",
        "source": ["yalindogusahin/glm53-flash-nvfp4-tp3 docs/GOTCHAS.md #8", "vllm-project/vllm issue #32136"],
        "refs": ["F08", "G#25", "A.2", "A.4"],
    },
    {
        "id": "nccl_wrong_gid",
        "class": "collective_init",
        "title": "NCCL_IB_GID_INDEX wrong on one node",
        "matchers": {"log": [r"ibv_modify_qp failed with 61\b|local GID ::(?:,|\s|$)"]},
        "cause": "One global GID index made a rank advertise a GID from the wrong subnet, or an all-zero GID; the "
                 "RoCE v2 index differs per node and per port.",
        "fix": "Let rdma_fabric read the RoCE v2 GID index per host and HCA from sysfs (it omits the variable "
               "when ambiguous); never render an empty NCCL_IB_GID_INDEX.",
        "source": ["MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks PR #26 and #172",
                   "tonyd2wild/DeepSeek-v4-Flash-Vision-Exp-DSpark-1M-NVFP4-KV-2x-DGX-Spark PR #40"],
        "refs": ["F03", "G#4", "I.3"],
    },
    {
        "id": "ibv_modify_qp",
        "class": "collective_init",
        "title": "NCCL paired HCAs that share no cable or subnet",
        "matchers": {"log": [r"ibv_modify_qp failed with (?P<errno>\d+).*on dev (?P<dev>\w+):(?P<port>\d+)"]},
        "cause": "NCCL pairs devices by index across ranks; with same-index cabling on a triangle, or a stock NCCL "
                 "that ignores subnet-aware routing, it connects ports that are not on the same cable.",
        "fix": "Cable the ring port 0 to port 1 as NVIDIA's three-node playbook shows and set "
               "NCCL_IB_SUBNET_AWARE_ROUTING=1; on a triangle use an image whose NCCL honours it.",
        "source": ["luxingcom/aicad-nccl-optimization issue #1",
                   "NVIDIA/dgx-spark-playbooks nvidia/connect-three-sparks/README.md"],
        "refs": ["G21"],
    },
    {
        "id": "nccl_no_net_plugin",
        "class": "collective_init",
        "title": "no RDMA in the container: NCCL has no NET plugin or falls back to sockets",
        "matchers": {"log": [r"Failed to initialize any NET plugin|NCCL error: invalid usage"]},
        "cause": "The rank container did not get /dev/infiniband, so NCCL has no IB transport (or silently "
                 "uses NET/Socket at a fraction of the bandwidth).",
        "fix": "Run the ranks with --device /dev/infiniband, --ulimit memlock=-1, --cap-add IPC_LOCK, host "
               "network and IPC (the lane's docker flags); check docker inspect Devices on every rank.",
        "source": ["getainode/ainode PR #87 (fixes #84)"],
        "refs": ["G04"],
    },
    {
        "id": "nccl_socket_fallback",
        "class": "collective_init",
        "title": "NCCL runs on sockets although the lane passes RDMA",
        "matchers": {"log": [r"NCCL INFO (?:NET/Socket\s*: Using|Using network Socket\b)"]},
        "cause": "NCCL found no usable IB device in the container (no /dev/infiniband, no memlock, or an HCA "
                 "filter that matches nothing) and chose the socket transport; the group serves at a fraction "
                 "of the fabric bandwidth.",
        "fix": "Run the ranks with --device /dev/infiniband, --ulimit memlock=-1 and --cap-add IPC_LOCK, check "
               "NCCL_IB_HCA against the Up HCAs, and require a 'NET/IB : Using' line at NCCL_DEBUG=INFO.",
        "source": ["getainode/ainode runbook (NET/Socket at 1.2 GB/s on two Sparks)"],
        "refs": [],
    },
    {
        "id": "nccl_version_skew",
        "class": "collective_init",
        "title": "NCCL downgraded inside the image",
        "matchers": {"log": [r"ncclCommInitRank: internal error|vLLM is using nccl==2\.(?:2\d|30\.[0-6])\."]},
        "cause": "A dependency install inside the image replaced nvidia-nccl-cu13 2.30.7 with an older NCCL, "
                 "which breaks the rendezvous on the Spark fabric.",
        "fix": "Rebuild the image with the NCCL pin restored (pip check; the log must say vLLM is using "
               "nccl==2.30.7) and redistribute it (image_sync).",
        "source": ["tonyd2wild/GLM-5.3-Flash-NVFP4-DFlash2-2x-DGX-Spark docs/DEPLOY-REPORT.md section 9"],
        "refs": ["G14", "G#24"],
    },
    {
        "id": "nccl_error",
        "class": "collective_init",
        "title": "NCCL failed to initialise",
        "matchers": {"log": [r"NCCL error|ncclSystemError|ncclInternalError|NCCL WARN"]},
        "generic": True,
        "cause": "NCCL could not build its communicator: a wrong or Down HCA in NCCL_IB_HCA, a wrong GID index, "
                 "or an interface without an address.",
        "fix": "Compare NCCL_IB_HCA and NCCL_IB_GID_INDEX with ibdev2netdev and sysfs on every node "
               "(rdma_fabric facts); every listed HCA must be Up.",
        "source": ["tonyd2wild/GLM-5.3-Flash-NVFP4-DFlash2-2x-DGX-Spark README step 4",
                   "tonyd2wild/GLM-5.3-Flash-NVFP4-1M-KV-4x-DGX-Spark docs/FIELD-NOTES-4NODE-100G.md"],
        "refs": ["G#3"],
    },
    {
        "id": "nccl_hca_prefix",
        "class": "collective_init",
        "title": "NCCL_IB_HCA prefix takes more devices than meant",
        "matchers": {"state": [{"fact": "nccl_hca_prefix_extra", "op": "present"}]},
        "cause": "NCCL_IB_HCA names match as prefixes unless written with a leading '=', so 'roce' or 'mlx5_1' "
                 "also selects other devices (Down ports included).",
        "fix": "Write the exact form '=dev1,dev2' (rdma_fabric renders it); parse '^' and ':port' suffixes.",
        "source": ["NVIDIA-NeMo/nemo-platform PR #922", "MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark PR #95"],
        "refs": ["F04"],
    },
    {
        "id": "stale_nccl_conf",
        "class": "collective_init",
        "title": "the image carries an /etc/nccl.conf",
        "matchers": {"state": [{"fact": "nccl_conf_in_container", "op": "present"}]},
        "cause": "An /etc/nccl.conf baked into the image overrides the environment the lane renders (in the "
                 "report two NCCL_IB_* settings froze the warmup).",
        "fix": "Remove /etc/nccl.conf from the image or override each of its settings in the lane's env.",
        "source": ["luxingcom/aicad-nccl-optimization issue #1"],
        "refs": [],
    },
    {
        "id": "ray_placement",
        "class": "collective_init",
        "title": "Ray executor cannot place the ranks",
        "matchers": {"log": [r"Current node has no GPU available|Every node should have a unique IP address|"
                             r"Waiting for creating a placement group of specs"]},
        "cause": "Ray's PACK placement anchors to the local node, a killed run kept its GPU reservation, or one "
                 "VLLM_HOST_IP was given to every node.",
        "fix": "Use the mp executor (the lanes do); under Ray use SPREAD placement, one VLLM_HOST_IP per host "
               "and tear down every Ray container before a relaunch.",
        "source": ["eugr/spark-vllm-docker issue #227", "gpustack/gpustack issue #4979"],
        "refs": ["G05", "A.1"],
    },
    # ---------------------------------------------------------------- fabric state
    {
        "id": "fabric_link_down",
        "class": "fabric",
        "title": "a fabric port the ranks use is down",
        "matchers": {"state": [{"fact": "fabric_link_down", "op": "present"}],
                     "kernel": [r"mlx5_core \S+: Link down"]},
        "cause": "The RoCE netdev the lane uses is down on this node, so NCCL picks nothing (or a Down HCA) and "
                 "the ranks fail after minutes of loading or hang.",
        "fix": "Bring the port up (ip link set <netdev> up), check the cable, then rerun site.yml.",
        "source": ["tonyd2wild/GLM-5.3-Flash-NVFP4-DFlash2-2x-DGX-Spark README step 4 (wrong NIC names fail "
                   "silently)"],
        "refs": ["G#39"],
    },
    {
        "id": "fabric_mtu_mismatch",
        "class": "fabric",
        "title": "fabric MTU differs from the lane's",
        "matchers": {"state": [{"fact": "fabric_mtu_mismatch", "op": "present"}]},
        "cause": "The fabric port's MTU is not the jumbo MTU the other ranks use; RoCE paths with unequal MTU "
                 "stall or fall back.",
        "fix": "Set the MTU back (ip link set <netdev> mtu 9000, and in netplan), then rerun site.yml.",
        "source": ["NVIDIA/dgx-spark-playbooks nvidia/connect-two-sparks/README.md (MTU 9000)"],
        "refs": ["G#40"],
    },
    {
        "id": "cable_overheat",
        "class": "fabric",
        "title": "optical cable overheats and the link drops",
        "matchers": {"kernel": [r"Cable error, High Temperature"]},
        "cause": "An active optical cable overheated; the link went down and the ranks timed out.",
        "fix": "Replace the AOC with a passive DAC or cool it; watch the module temperature.",
        "source": ["tonyd2wild/GLM-5.3-Flash-NVFP4-1M-KV-4x-DGX-Spark docs/FIELD-NOTES-4NODE-100G.md"],
        "refs": ["G#41"],
    },
    {
        "id": "perftest_64k",
        "class": "fabric",
        "title": "ib_write_bw fails above 64 KiB on GB10",
        "matchers": {"log": [r"local protection error 0x3b 0x0 0x9d"], "kernel": [r"local protection error 0x3b"]},
        "cause": "A perftest limitation on GB10: RDMA WRITE above 65536 bytes fails with a responder local "
                 "protection error while NCCL works.",
        "fix": "Probe with <= 64 KiB messages or judge the fabric by NCCL all_reduce_perf instead.",
        "source": ["linux-rdma/perftest issue #394"],
        "refs": ["G02"],
    },
    # ---------------------------------------------------------------- processes and ports
    {
        "id": "rank_killed",
        "class": "process",
        "title": "the rank was killed from outside (SIGKILL, exit 137)",
        "matchers": {"exit": {"exit_code": 137, "oom_killed": False}},
        "cause": "The rank container ended with SIGKILL and docker reports no cgroup OOM: a docker kill/rm, a "
                 "host OOM killer or a userspace memory monitor.",
        "fix": "Look in the kernel log and journal for an OOM killer (other entries); otherwise find who killed it, "
               "then rerun site.yml: it tears every rank down and relaunches workers first.",
        "source": ["vllm-project/vllm issue #32136", "GLM-5.3-Flash TP2 deploy report (teardown both ranks)"],
        "refs": ["G08"],
    },
    {
        "id": "worker_orphaned",
        "class": "process",
        "title": "a worker outlived its head",
        "matchers": {"exit": {"exit_code": 0, "oom_killed": False},
                     "state": [{"fact": "head_down_worker_up", "op": "present"}],
                     "log": [r"Failed to recv, got 0 bytes\. Connection was likely closed"]},
        "cause": "The head died; a headless worker either exits 0 or waits on a dead TCPStore. Restarting one "
                 "container leaves an orphaned, non-serving group.",
        "fix": "Restart the group as one action: save logs, stop every rank, relaunch workers first and the "
               "head last (site.yml or playbooks/restart.yml).",
        "source": ["eugr/spark-vllm-docker issue #257", "vllm-project/vllm issue #32136"],
        "refs": ["A.5"],
    },
    {
        "id": "port_taken",
        "class": "process",
        "title": "the API or master port is taken by another process",
        "matchers": {"state": [{"fact": "port_taken", "op": "present"}],
                     "log": [r"Address already in use|EADDRINUSE"]},
        "cause": "Another process listens on the port the rank needs, so the rank cannot bind it.",
        "fix": "Stop the process holding the port (ss -ltnp names it) or move the lane's port, then rerun "
               "site.yml.",
        "source": ["yalindogusahin/glm53-flash-nvfp4-tp3 scripts/serve.sh (port check)"],
        "refs": ["A.3"],
    },
    {
        "id": "docker_group_missing",
        "class": "node_state",
        "title": "the service user is not in the docker group",
        "matchers": {"state": [{"fact": "docker_group_missing", "op": "present"}],
                     "log": [r"permission denied while trying to connect to the Docker daemon socket"]},
        "cause": "The service user cannot reach dockerd; an SSH ControlMaster opened before the group was added "
                 "keeps the old groups and hides the fix.",
        "fix": "Add the user to the docker group (node_prep) and reset the SSH connection.",
        "source": ["yalindogusahin/glm53-flash-nvfp4-tp3 issue #9", "localaiguyy/GLM-5.3-Flash-NVFP4-3x-DGX-Spark "
                   "preflight"],
        "refs": ["F22", "G#17", "C.2"],
    },
    {
        "id": "disk_full",
        "class": "node_state",
        "title": "disk nearly full on a node",
        "matchers": {"state": [{"fact": "disk_nearly_full", "op": "present"}],
                     "log": [r"No space left on device"]},
        "cause": "The data root or the model tree has too little free space for the image, the weights or "
                 "the JIT caches.",
        "fix": "Free space on the named filesystem (old images: docker image prune), then rerun site.yml.",
        "source": ["minefield trap 150 (docker save fills /var/lib/docker)"],
        "refs": ["G16"],
    },
    # ---------------------------------------------------------------- images and fix files
    {
        "id": "image_differs",
        "class": "image",
        "title": "the rank image differs from the head's",
        "matchers": {"state": [{"fact": "image_differs", "op": "present"}]},
        "cause": "This node runs a different image (ID or content fingerprint) from the head; mixed images boot "
                 "garbage or assert on one rank.",
        "fix": "Redistribute the head's image (image_sync) and restart the group; copy whole files, never edit "
               "over ssh.",
        "source": ["tonyd2wild/GLM-5.3-Flash-NVFP4-DFlash2-2x-DGX-Spark README (grep IMAGE on both nodes)",
                   "tonyd2wild/GLM-5.3-Flash-NVFP4-1M-KV-4x-DGX-Spark runbook rule 3"],
        "refs": ["G#2", "C.7", "G#22", "G#23"],
    },
    {
        "id": "image_cuda_newer_than_driver",
        "class": "image",
        "title": "the image's CUDA toolchain is newer than the driver",
        "matchers": {"log": [r"cudaErrorUnsupportedPtxVersion|the provided PTX was compiled with an unsupported "
                             r"toolchain"]},
        "cause": "The image's CUDA (13.x on the lanes) is newer than the node's driver supports (580 is the first "
                 "driver with CUDA 13): a kernel JIT-compiled at first use fails with error 222.",
        "fix": "Install nvidia-driver-580-open or newer on every node and reboot (nvidia-smi shows the version), or "
               "use an image built for the node's CUDA version.",
        "source": ["minefield trap 08"],
        "refs": ["G18", "C.3"],
    },
    {
        "id": "gpu_arch_unsupported",
        "class": "image",
        "title": "the image has no kernels for this node's GPU",
        "matchers": {"log": [r"no kernel image is available for execution on the device"]},
        "cause": "The image's CUDA kernels were built for other GPU architectures than this node's: a lane built for "
                 "GB10 (sm_121) on another GPU, or an image without sm_121 kernels (a cu128 torch) on a GB10.",
        "fix": "Run the lane on DGX Spark (GB10) nodes whose nvidia-smi names 'NVIDIA GB10', with an image built for "
               "sm_121 (CUDA 13).",
        "source": ["vllm-project/vllm issue #30855", "vllm-project/vllm issue #20193"],
        "refs": [],
    },
    {
        "id": "nvidia_runtime_missing",
        "class": "image",
        "title": "docker has no nvidia runtime",
        "matchers": {"log": [r"unknown or invalid runtime name: nvidia"],
                     "journal": [r"unknown or invalid runtime name: nvidia"]},
        "cause": "The NVIDIA Container Toolkit is not registered with dockerd, so GPU containers cannot start.",
        "fix": "Run nvidia-ctk runtime configure --runtime=docker and restart docker on that node.",
        "source": ["NVIDIA/xr-ai docs/source/guides/troubleshooting.md"],
        "refs": ["G17"],
    },
    {
        "id": "fix_file_drift",
        "class": "fix_file",
        "title": "the top-k fix file differs from the pinned one",
        "matchers": {"state": [{"fact": "fix_file_drift", "op": "present"}]},
        "cause": "The fix file on the node or inside the running rank is missing or does not have the lane's "
                 "sha256, so this rank may run the unfixed kernel.",
        "fix": "Rerun site.yml: kernel_fix restores the file and vllm_ranks restarts the group when a running "
               "rank sees other bytes.",
        "source": ["tonyd2wild/GLM-5.3-Flash-NVFP4-DFlash2-2x-DGX-Spark README step 3"],
        "refs": ["C.8", "G#35"],
    },
    {
        "id": "topk_wall",
        "class": "fix_file",
        "title": "decode past ~24K tokens kills the engine (top-k kernel)",
        "matchers": {"log": [r"persistent_topk would oversubscribe"]},
        "cause": "The image's top-k kernel needs more shared memory than GB10 has; without the SM121 fix on "
                 "every rank any decode past ~24K context kills the engine.",
        "fix": "Mount the sparse_attn_indexer_kpool.py fix on every rank (kernel_fix) and prove it with the "
               "long-prompt gate.",
        "source": ["Stars1233/GLM-5.3-Flash-NVFP4-2x-DGX-Spark docs/SM121-CRASH-FORENSICS",
                   "yalindogusahin/glm53-flash-nvfp4-tp3 issue #1"],
        "refs": ["F25", "G#1"],
    },
    # ---------------------------------------------------------------- weights, templates, padding
    {
        "id": "weights_mismatch",
        "class": "weights",
        "title": "a weight file differs from the manifest (truncated or missing shard)",
        # the engine's "Error while deserializing header" alone is not evidence of a bad file (H11): doctor reads
        # the headers itself (weights_header_bad, safetensors_read_failed below)
        "matchers": {"state": [{"fact": "weights_mismatch", "op": "present"}],
                     "log": [r"incomplete metadata, file not fully covered"]},
        # a shard cut short inside its header also fails to parse: the size says why
        "supersedes": ["weights_header_bad"],
        "cause": "A shard on this node is shorter than the manifest (an interrupted copy) or missing.",
        "fix": "Rerun site.yml: model_weights fetches the file again; check free space and the share first.",
        "source": ["yalindogusahin/glm53-flash-nvfp4-tp3 scripts/serve.sh (weights checks)"],
        "refs": ["C.9"],
    },
    {
        "id": "weights_header_bad",
        "class": "weights",
        "title": "a shard's safetensors header does not parse on this node",
        "matchers": {"state": [{"fact": "weights_header_bad", "op": "present"}]},
        "cause": "Read on the node outside the engine, the shard's 8-byte header length or its JSON header is not "
                 "valid: this node's copy of the file is damaged although its size is the expected one (a size that "
                 "differs is weights_mismatch).",
        "fix": "Rerun site.yml --tags model_weights: the manifest check finds the copy and fetches or copies it "
               "again. When the file's sha256 equals the source's, the source itself is bad: fetch another revision.",
        "source": ["eugr/spark-vllm-docker issue #275 (safetensors_rust.SafetensorError: Error while deserializing "
                   "header: invalid JSON in header)"],
        "refs": [],
    },
    {
        "id": "safetensors_read_failed",
        "class": "weights",
        "title": "the engine failed to read a shard header that parses on the node",
        "matchers": {"state": [{"fact": "safetensors_read_failed", "op": "present"}]},
        "cause": "The engine reported a header it could not deserialize, but every shard's header parses when read "
                 "on the node: the files are valid, and the failure is in the read path of this rank (the bind "
                 "mount or network share it reads through, a short read, the loader), not in the checkpoint.",
        "fix": "Do not re-download. Read the shard the evidence names inside this rank's container at the same "
               "path (the mount may show other bytes than the node), compare this rank's mounts and share options "
               "with the other ranks' (doctor lists them), and try the load with the checkpoint on local disk.",
        "source": ["eugr/spark-vllm-docker issue #275: the same shard failed 9 times while the files matched the "
                   "Hugging Face SHA-256 after a forced re-download"],
        "refs": [],
    },
    {
        "id": "file_not_found",
        "class": "missing_file",
        "title": "a weight, template or fix file is missing inside the container",
        "matchers": {"log": [r"FileNotFoundError|No such file or directory|does not appear to have a file named|"
                             r"(?:Cannot|Can't) find (?:the )?(?:model|config|file)|OSError: .*(?:not found|"
                             r"does not exist)|is not a local folder and is not a valid model identifier"]},
        "cause": "A file the rank opens is absent in the container: an NFS export that does not cross a bind "
                 "mount, root-squash hiding 0600 files, or a bind source docker created as an empty directory.",
        "fix": "Check the rank's mounts against the node (doctor lists both) and model_weights' manifest; "
               "files 0644, directories 0755 on shares.",
        "source": ["yalindogusahin/glm53-flash-nvfp4-tp3 scripts/serve.sh",
                   "tonyd2wild/GLM-5.3-Flash-NVFP4-1M-KV-4x-DGX-Spark launcher (test -f every bind source)"],
        "refs": ["F23", "G#16", "G#36"],
    },
    {
        "id": "no_chat_template",
        "class": "missing_file",
        "title": "no chat template",
        "matchers": {"log": [r"default chat template is no longer allowed"]},
        "cause": "The NVFP4 checkpoint keeps its template in chat_template.jinja, which a downloader filtering "
                 "on *.json skipped; chat requests fail while completions work.",
        "fix": "Fetch *.jinja with the weights (model_weights) and pass --chat-template.",
        "source": ["yalindogusahin/glm53-flash-nvfp4-tp3 docs/GOTCHAS.md #6", "vllm-project/vllm issue #39279"],
        "refs": ["F13", "G#15", "G#14"],
    },
    {
        "id": "drafter_heads",
        "class": "config",
        "title": "drafter heads do not divide by the TP size",
        "matchers": {"log": [r"total_num_heads % tp_size == 0"]},
        "cause": "The DFlash2 drafter has 32 query and 8 KV heads; at TP3 it asserts, and "
                 "draft_tensor_parallel_size is ignored on this load path.",
        "fix": "Pad the drafter to 48/12 (drafter_pad); 36/9 divides but does not boot with this KV layout.",
        "source": ["yalindogusahin/glm53-flash-nvfp4-tp3 results/dflash2-tp3-2026-08-28.md"],
        "refs": ["F12", "D.1", "G#32"],
    },
    {
        "id": "eagle3_interface",
        "class": "config",
        "title": "the overlay mount reverted the DFlash2 aux capture",
        "matchers": {"log": [r"Model does not support EAGLE3 interface"]},
        "cause": "At TP3 the overlay mount replaced model.py with a copy lacking the DFlash2 aux-capture glue.",
        "fix": "Mount the DFlash2 variant of the model overlay when the lane uses dflash (tp_pad).",
        "source": ["yalindogusahin/glm53-flash-nvfp4-tp3 results"],
        "refs": ["G#33", "G#27", "G#28"],
    },
    {
        "id": "kv_pool_below_peers",
        "class": "config",
        "title": "this rank profiles less KV than its peers; the pool is the minimum",
        "matchers": {"state": [{"fact": "kv_pool_below_peers", "op": "present"}]},
        "cause": "Each rank profiles its own KV headroom and the group uses the smallest; a worker often "
                 "profiles 4-5 GiB less than the head.",
        "fix": "Read the pool on every rank (vllm_health does) and size the lane from the minimum, or pin the KV.",
        "source": ["tonyd2wild/GLM-5.3-Flash-NVFP4-262K-2x-DGX-Spark README (6.25 GiB logged, 2.29 GiB bound)"],
        "refs": ["F16", "G#13"],
    },
    {
        "id": "fastsafetensors_wedge",
        "class": "hang",
        "title": "a parallel shard loader wedges a worker",
        "matchers": {"log": [r"Watchdog caught collective operation timeout: WorkNCCL\(.*OpType=BROADCAST"]},
        "cause": "fastsafetensors (or instanttensor) broadcasts inside the loader on multi-node GB10; the NCCL "
                 "watchdog fires and the worker stays wedged.",
        "fix": "Use the default loader with more than one node; power-cycle a wedged worker.",
        "source": ["minefield trap 131", "tonyd2wild/GLM-5.3-Flash-NVFP4-DFlash2-2x-DGX-Spark docs/OPEN-PROBLEMS.md #3"],
        "refs": ["G20", "G#42"],
    },
    # ---------------------------------------------------------------- GPU and kernel
    {
        "id": "gpu_xid",
        "class": "gpu",
        "title": "GPU Xid error in the kernel log",
        "matchers": {"kernel": [r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<xid>\d+)"]},
        "cause": "The GPU driver reported an Xid fault; the rank on this node failed with it.",
        "fix": "Note the Xid number, reboot the node (never nvidia-smi -r on GB10) and relaunch the whole group.",
        "source": ["Stars1233/GLM-5.3-Flash-NVFP4-2x-DGX-Spark LOG (nvidia-smi -r then CUDA)",
                   "yalindogusahin/glm53-flash-nvfp4-tp3 issue #9 (0x51 events are benign; alert on Xid)"],
        "refs": ["G#38", "G#50"],
    },
    {
        "id": "gpu_low_power",
        "class": "gpu",
        "title": "GB10 stuck in a low-power state",
        "matchers": {"state": [{"fact": "gpu_stuck_low_power", "op": "present"}]},
        "cause": "Under load the GPU shows high utilization at ~800 MHz and ~20 W with no throttle reason; in TP "
                 "every rank waits for this one.",
        "fix": "Remove AC power from the node (a reboot is not enough), then benchmark again.",
        "source": ["minefield trap 124", "Stars1233/GLM-5.3-Flash-NVFP4-2x-DGX-Spark docs/SPEED-NIGHT-2026-09-18.md"],
        "refs": ["G19", "G#37", "C.4"],
    },
    # ---------------------------------------------------------------- API behaviour
    {
        "id": "token_corruption",
        "class": "weights",
        "title": "the engine emits corrupted token ids (U+FFFD in the output)",
        "matchers": {"api": [u"\ufffd"]},
        "cause": "ModelOpt-quantized NVFP4 builds of GLM-5.3-Flash emit intermittent corrupted token ids that decode "
                 "to U+FFFD; nearly invisible in English, they break a tool call's markup when they land inside it.",
        "fix": "Serve the compressed-tensors checkpoint (RedHatAI/GLM-5.3-Flash-NVFP4, the lanes named *_ct); keep "
               "the corruption probe (health.corruption_probe) in the full health gate.",
        "source": ["tonyd2wild/GLM-5.3-Flash-NVFP4-DFlash2-2x-DGX-Spark README (U+FFFD 4 / 9 / 8 vs 0 / 0 / 0)",
                   "vllm-project/vllm issue #54150"],
        "refs": [],
    },
    {
        "id": "tool_parser_zero_arg",
        "class": "api",
        "title": "the glm47 tool parser drops zero-argument tool calls",
        "matchers": {"log": [r"Failed to extract tool call spec"]},
        "cause": "The GLM tool parser passes None to a regex for a tool without parameters; the call is lost.",
        "fix": "Use an image with the parser fix (vLLM #32213) and keep the zero-argument tool smoke in "
               "vllm_health.",
        "source": ["vllm-project/vllm issue #32213", "vllm-project/vllm issue #32436"],
        "refs": ["F21"],
    },
    {
        "id": "tool_call_mangled",
        "class": "api",
        "title": "tool calls lose their arguments or carry the parser's markup",
        "matchers": {"api": [r'"name"\s*:\s*"[^"]*<(?:/?tool_call|/?arg_key|/?arg_value)>']},
        "cause": "Under concurrency, and when streaming with speculative decoding, the GLM tool parser returns a call "
                 "with empty arguments ({} although the schema requires some) or a name with the model's "
                 "<arg_key>/<arg_value> markup fused in; the client then calls a tool that does not exist.",
        "fix": "Use an image whose glm47 parser has the fixes (vLLM #49248 and the streaming fixes); vllm_health's "
               "tool smoke runs at the deployed concurrency, streamed and not, and judges the arguments against "
               "the tool's schema (empty arguments are found there, not by this pattern).",
        "source": ["vllm-project/vllm issue #49248", "ormandj/sglang-glm53-flash-sm120 issue #5",
                   "vllm-project/vllm issue #44326"],
        "refs": ["G11", "G12"],
    },
    {
        "id": "reasoning_empty_content",
        "class": "api",
        "title": "all tokens went to reasoning: empty content",
        "matchers": {"api": [r'"content"\s*:\s*""[^{}]*"reasoning"|"reasoning"[^{}]*"content"\s*:\s*""']},
        "cause": "The template opens a think block and reasoning effort defaults to max, so a short max_tokens "
                 "ends in reasoning with empty content; the model is fine.",
        "fix": "Give max_tokens room or lower reasoning_effort; read both reasoning and content (vllm_health).",
        "source": ["yalindogusahin/glm53-flash-nvfp4-tp3 docs/GOTCHAS.md #2-4"],
        "refs": ["F14", "F.3"],
    },
    # ---------------------------------------------------------------- catch-all
    {
        "id": "engine_dead",
        "class": "other",
        "title": "the engine died (no more specific line)",
        "matchers": {"log": [r"EngineDeadError|Engine core initialization failed|WorkerProc initialization failed|"
                             r"RuntimeError:|ValueError:|AssertionError|Traceback \(most recent call last\)"]},
        "generic": True,
        "cause": "The engine stopped with an error no more specific entry names.",
        "fix": "Read the rank's log from the first traceback (doctor shows the last lines); the earliest rank to "
               "fail is usually the cause, the others cascade.",
        "source": ["vllm-project/vllm issue #32136"],
        "refs": [],
    },
]
