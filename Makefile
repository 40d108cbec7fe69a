# dgxspark.vllm: developer and CI entry points. `make test` is what CI runs.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
ACT := source $(VENV)/bin/activate &&
SANITY_ROOT ?= /tmp/dgxspark-sanity
ALL_SCENARIOS := $(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml))))
# The scenarios CI runs: each has passed `molecule test` on the simulated nodes. vllm_ranks boots a
# real two-rank vLLM inside molecule's own nodes; the same flow runs in tests/e2e on the demo fleet, so
# CI leaves it out. sim_fleet's scenario starts two nodes and checks their stand-ins: every other
# scenario here starts its nodes through the same role (molecule/_shared) and checks those stand-ins
# through its own role, and make e2e-tp3 / e2e build and boot fleets with it, so CI leaves it out too
# (about 2 minutes). `make molecule SCENARIOS="$(ALL_SCENARIOS)"` runs every one.
# Longest first (seconds alone on 2 cores: image_sync about 300, kernel_fix about 45), so that the two lanes of make
# test, which take them from one queue (molecule-lane1/2), end close together.
SCENARIOS ?= image_sync node_prep model_weights rdma_fabric vllm_watchdog vllm_monitoring preflight vllm_health tp_pad kernel_fix
INVENTORY ?= inventories/sim/hosts.yml
export ANSIBLE_FORCE_COLOR ?= 0
export PYTHONPATH := $(CURDIR)/collections

.PHONY: help venv host-deps lint sanity units molecule molecule-lane1 molecule-lane2 e2e e2e-tp3 test-faults test-watchdog test demo demo-down sim-up sim-down sim-images bench

help:
	@echo "make demo       simulated fleet up + site.yml end to end (the embedded default)"
	@echo "make test       lint, sanity, units, molecule, e2e TP3 + TP2, faults (what CI runs)"
	@echo "make demo-down  remove every container, network and volume the demo created"

$(VENV)/.stamp: requirements.txt requirements-dev.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements-dev.txt
	touch $@

venv: $(VENV)/.stamp

host-deps:
	bash tools/host-deps.sh

lint: venv
	$(ACT) yamllint -s .
	$(ACT) ansible-lint --profile production
	$(ACT) antsibull-changelog lint

sanity: venv
	bash tools/sanity.sh $(SANITY_ROOT)

# Two workers (pytest-xdist): most of these tests wait on an ansible-playbook child, and the machine has 2 cores.
UNITS_WORKERS ?= 2
units: venv
	$(ACT) pytest -p no:cacheprovider -n $(UNITS_WORKERS) tests/unit
	$(ACT) pytest -p no:cacheprovider -n $(UNITS_WORKERS) tests/bad_inputs

# Under a lock: in make test, lane 2 reaches e2e-tp3 (and molecule), which need the images, while lane 1 may still be
# building them; the second caller waits for the first and then finds them current.
sim-images: venv host-deps
	@mkdir -p .sim
	$(ACT) flock .sim/images.lock ansible-playbook playbooks/sim_up.yml -e sim_fleet_nodes_enabled=false

molecule: venv host-deps sim-images
	$(ACT) python tools/molecule_queue.py $(SCENARIOS)

# make test's share of the scenarios in each lane: both take from one queue file (tools/molecule_queue.py), which
# `test` empties first. Lane 2 starts on them beside the fault suite; lane 1 takes what is left when the suite ends.
MOLECULE_QUEUE ?= .sim/molecule-queue
molecule-lane1 molecule-lane2: venv host-deps sim-images
	$(ACT) python tools/molecule_queue.py --queue $(MOLECULE_QUEUE) $(SCENARIOS)

e2e: venv host-deps
	$(ACT) pytest -p no:cacheprovider --durations=0 tests/e2e/test_demo_tp2.py

# TP3: the ring fleet end to end (sim_tp3: rendezvous on management, padded checkpoint, start and
# teardown order), then the padding proof (padded 6q/3kv at TP3 vs unpadded at TP1, greedy ids equal).
e2e-tp3: venv host-deps sim-images
	$(ACT) pytest -p no:cacheprovider --durations=0 tests/e2e/test_sim_tp3.py tests/e2e/test_tp3_padding_equivalence.py

# Fault injection on a serving simulated fleet (tests/e2e/faults): deploys it when it does not serve.
# DGXSPARK_FAULTS_INVENTORY picks the fleet (default inventories/sim/hosts.yml, the one `make e2e` deploys).
test-faults: venv host-deps
	$(ACT) pytest -p no:cacheprovider --durations=0 tests/e2e/faults

# The watchdog's scenarios alone (tests/e2e/faults/test_45_watchdog.py, all of them also in test-faults and so in CI)
# on DGXSPARK_FAULTS_INVENTORY. The API-key lane is in test_30_security.py.
test-watchdog: venv host-deps
	$(ACT) pytest -p no:cacheprovider --durations=0 tests/e2e/faults/test_45_watchdog.py

# What CI runs (.ci/run), in two lanes side by side after the images (tools/timed_stages.py: 'a,b|c,d' runs lane
# a then b beside lane c then d). The machine has 2 cores; the stages in sequence took 89 minutes, close to CI's
# 90. The images come first (331 s alone on a machine that has none, as CI's has; 10.5 s when they are current).
# Lane 1 deploys the TP2 fleet (`e2e`) and the fault suite reuses it: its boots and watchdog windows set the pace.
# Lane 2 takes the CPU lane 1 leaves idle: nice 10 and, on a cgroup-v1 machine, a CPU cgroup of low cpu.shares that
# its containers join too. It boots the TP3 fleet (its test removes it at the end), then lint, sanity, units and
# molecule (its nodes on 198.19/16). Molecule is shared: both lanes end with a molecule-laneN stage on one queue
# (tools/molecule_queue.py), lane 2 starting beside the fault suite, lane 1 joining when the suite ends. Measured
# (README.md, Tests): 59.2 minutes on a fresh clone with the images current; 66.5 with molecule in lane 2 alone.
# The machine is busy 92-100 % in every order: only less work makes the run shorter. The fleets, molecule's
# nodes, their networks and the reports each test reads are apart (the TP3 test reads its own run's health report,
# not reports/health-latest.json). e2e-tp3 depends on sim-images (under a lock, so a run beside a build waits).
# A failing stage ends its lane; the other lane finishes its running stage and starts no new one. Every
# stage's seconds, start and the machine's load go to the table at the end and to $(TEST_STAGES_JSON)
# (benchmarks/converged_run.py --stages); a lane's output is printed whole when each of its stages ends.
TEST_STAGES ?= sim-images e2e,test-faults,molecule-lane1|e2e-tp3,lint,sanity,units,molecule-lane2
TEST_STAGES_JSON ?= reports/make-test-stages.json
test: venv host-deps
	@mkdir -p $(dir $(MOLECULE_QUEUE)) && rm -f $(MOLECULE_QUEUE)
	$(PY) tools/timed_stages.py --make "$(MAKE)" --json $(TEST_STAGES_JSON) $(foreach s,$(TEST_STAGES),'$(s)')

sim-up: venv host-deps
	$(ACT) ansible-playbook playbooks/sim_up.yml -i $(INVENTORY)

sim-down: venv
	$(ACT) ansible-playbook playbooks/sim_down.yml -i $(INVENTORY)

demo: sim-up
	$(ACT) ansible-playbook site.yml -i $(INVENTORY)
	$(ACT) bash tools/demo-summary.sh $(INVENTORY)

# Removes the fleet of INVENTORY only (containers, networks, node volumes); another fleet on the
# machine (sim_tp3, sim_faults) is left alone: `make demo-down INVENTORY=inventories/sim_tp3/hosts.yml`.
demo-down: venv
	$(ACT) ansible-playbook playbooks/sim_down.yml -i $(INVENTORY) -e sim_fleet_purge=true

bench: venv host-deps
	$(ACT) python benchmarks/demo_timings.py
