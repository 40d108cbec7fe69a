"""vllm_monitoring's Prometheus files (issue 33): the role's own templates rendered by Ansible's templar as the
template module renders them (trim_blocks), with the role's defaults and vars, then checked by promtool
(`check rules`, `check config`) and run against tests/unit/promtool/*_test.yml (`test rules`): every alert fires on a
series that should fire and stays silent on a near miss, and every recording rule yields its worked-out value.
promtool comes from the Debian package `prometheus` (tools/host-deps.sh); without it these tests are skipped."""
import os
import re
import shutil
import subprocess

import pytest
import yaml
import jinja2
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.dgxspark.vllm.plugins.filter.file_kinds import FilterModule as FileKinds
from tests.unit.conftest import ROOT

ROLE = os.path.join(ROOT, "roles", "vllm_monitoring")
PROMTOOL_TESTS = os.path.join(ROOT, "tests", "unit", "promtool")
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not found: apt-get install prometheus "
                                                             "(Debian 12 ships 2.42; tools/host-deps.sh)")

HOSTS = {"spark-a": "10.0.0.1", "spark-b": "10.0.0.2", "spark-c": "fd00::3"}
# The thresholds tests/unit/promtool/alerts_test.yml is written for (its header says the same).
TEST_THRESHOLDS = {"vllm_monitoring_fabric_mtu": {"enp1s0f0np0": 9000}, "vllm_monitoring_decode_baseline_tok_s": 40.0}
SPEC_LANE = {"serve": {"api_port": 8000, "speculative_config": {"method": "mtp", "num_speculative_tokens": 4}}}


def _trusted(value):
    """A role's defaults and vars are templates to Ansible (trusted); a plain YAML load is not."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    return value


def _role_vars(**overrides):
    loader = DataLoader()
    variables = {}
    for path in (os.path.join(ROLE, "defaults", "main.yml"), os.path.join(ROLE, "vars", "main.yml"),
                 os.path.join(ROOT, "roles", "shared_defaults", "defaults", "main.yml")):
        with open(path) as f:
            variables.update(_trusted(yaml.safe_load(f)))
    variables.update({
        "groups": {"spark_cluster": sorted(HOSTS), "vllm_head": ["spark-a"], "vllm_workers": ["spark-b", "spark-c"]},
        "hostvars": {h: {"ansible_host": a} for h, a in HOSTS.items()},
        "inventory_hostname": "spark-a", "ansible_managed": "Ansible managed",
        "vllm_lane_spec": {"serve": {"api_port": 8000, "speculative_config": None}},
    })
    variables.update(overrides)
    return loader, variables


def render(template, **overrides):
    """The role's template as the template module renders it: variables resolved by Ansible's Templar (the
    role's defaults and vars reference each other), the text by Jinja with trim_blocks and the collection's
    file-kind filters (without installing Ansible's collection loader into this test process)."""
    loader, variables = _role_vars(**overrides)
    templar = Templar(loader=loader, variables=variables)
    resolved = {}
    for name, value in variables.items():
        try:
            resolved[name] = templar.template(value)
        except Exception:  # pylint: disable=broad-except
            continue  # a variable this template does not use (StrictUndefined names it if it does)
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    for name, fn in FileKinds().filters().items():
        env.filters["dgxspark.vllm." + name] = fn
    with open(os.path.join(ROLE, "templates", template)) as f:
        return env.from_string(f.read()).render(**resolved)


def promtool(*args, cwd=None):
    res = subprocess.run([PROMTOOL] + list(args), cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    return res.returncode, res.stdout + res.stderr


def _alerts(text):
    return [r["alert"] for g in yaml.safe_load(text)["groups"] for r in g["rules"] if "alert" in r]


def _without_annotations(text):
    """The rules with their annotations removed: the promtool tests compare labels only (their templates are checked
    by `promtool check rules`)."""
    data = yaml.safe_load(text)
    for group in data["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    return yaml.safe_dump(data)


def test_optional_alerts_follow_the_lane_and_the_variables():
    # no draft model, no bench baseline, no fabric map: those three families are not rendered
    plain = _alerts(render("dgxspark-vllm-alerts.yml.j2"))
    assert plain == ["VllmEndpointDown", "VllmNodeExporterDown", "VllmRankDead", "VllmWedged", "VllmWatchdogGaveUp",
                     "VllmRestartsHigh", "VllmKvCacheNearFull", "VllmNodeMemoryLow"]
    full = _alerts(render("dgxspark-vllm-alerts.yml.j2", vllm_lane_spec=SPEC_LANE, **TEST_THRESHOLDS))
    assert set(full) - set(plain) == {"VllmSpecDecodeAcceptanceLow", "VllmDecodeSlow", "VllmFabricPortDown",
                                      "VllmFabricMtuChanged"}


def test_thresholds_reach_the_expressions():
    rules = {r["alert"]: r for g in yaml.safe_load(render(
        "dgxspark-vllm-alerts.yml.j2", vllm_lane_spec=SPEC_LANE, vllm_monitoring_mem_available_min_gib=2.5,
        vllm_monitoring_decode_baseline_tok_s=30.0, vllm_monitoring_decode_min_ratio=0.6,
        vllm_monitoring_fabric_mtu={"enp1s0f0np0": 9000, "enP2p1s0f0np0": 4200}))["groups"] for r in g["rules"]}
    assert rules["VllmNodeMemoryLow"]["expr"].endswith("< %d" % int(2.5 * 2 ** 30))
    assert re.search(r"< 18\.0$", rules["VllmDecodeSlow"]["expr"])
    mtu = rules["VllmFabricMtuChanged"]["expr"]
    assert 'device="enP2p1s0f0np0"} != 4200' in mtu and 'device="enp1s0f0np0"} != 9000' in mtu


def test_the_decode_baseline_comes_from_the_history_unless_set():
    def decode_slow(**kw):
        rules = {r["alert"]: r for g in yaml.safe_load(render("dgxspark-vllm-alerts.yml.j2", **kw))["groups"]
                 for r in g["rules"]}
        return rules.get("VllmDecodeSlow")
    # what the role's history task returns for a deployment whose passing bench measured 25.0 tok/s
    from_history = decode_slow(_vllm_monitoring_history={"decode_baseline": 25.0, "changed": False})
    assert re.search(r"< 12\.5$", from_history["expr"]) and "25.0 tok/s" in from_history["annotations"]["description"]
    # the variable wins; a history without figures (or the task skipped) renders no rule
    assert re.search(r"< 20\.0$", decode_slow(_vllm_monitoring_history={"decode_baseline": 25.0},
                                              vllm_monitoring_decode_baseline_tok_s=40.0)["expr"])
    assert decode_slow(_vllm_monitoring_history={"decode_baseline": None}) is None
    assert decode_slow(_vllm_monitoring_history={"skipped": True}) is None


@needs_promtool
def test_recording_rules_check_and_values(tmp_path):
    shutil.copy(os.path.join(ROLE, "files", "dgxspark-vllm-recording.yml"), tmp_path)
    shutil.copy(os.path.join(PROMTOOL_TESTS, "recording_test.yml"), tmp_path)
    rc, out = promtool("check", "rules", "dgxspark-vllm-recording.yml", cwd=tmp_path)
    assert rc == 0, out
    rc, out = promtool("test", "rules", "recording_test.yml", cwd=tmp_path)
    assert rc == 0, out


@needs_promtool
@pytest.mark.parametrize("extra", [{}, {"vllm_lane_spec": SPEC_LANE, **TEST_THRESHOLDS}], ids=["plain", "full"])
def test_rendered_alert_rules_pass_promtool_check(tmp_path, extra):
    (tmp_path / "alerts.yml").write_text(render("dgxspark-vllm-alerts.yml.j2", **extra))
    rc, out = promtool("check", "rules", "alerts.yml", cwd=tmp_path)
    assert rc == 0, out


def _run_alert_tests(tmp_path, **overrides):
    text = render("dgxspark-vllm-alerts.yml.j2", vllm_lane_spec=SPEC_LANE, **dict(TEST_THRESHOLDS, **overrides))
    (tmp_path / "dgxspark-vllm-alerts.yml").write_text(_without_annotations(text))
    shutil.copy(os.path.join(PROMTOOL_TESTS, "alerts_test.yml"), tmp_path)
    return promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)


@needs_promtool
def test_every_alert_fires_and_stays_silent_on_a_near_miss(tmp_path):
    rc, out = _run_alert_tests(tmp_path)
    assert rc == 0, out
    # every rendered alert has a case where it fires and one where it does not
    with open(os.path.join(PROMTOOL_TESTS, "alerts_test.yml")) as f:
        cases = [c for t in yaml.safe_load(f)["tests"] for c in t.get("alert_rule_test", [])]
    fires = {c["alertname"] for c in cases if c["exp_alerts"]}
    silent = {c["alertname"] for c in cases if not c["exp_alerts"]}
    rendered = set(_alerts((tmp_path / "dgxspark-vllm-alerts.yml").read_text()))
    assert rendered - fires == set() and rendered - silent == set()


@needs_promtool
@pytest.mark.parametrize("overrides, alert", [
    ({"vllm_monitoring_kv_usage_max": 0.98}, "VllmKvCacheNearFull"),
    ({"vllm_monitoring_mem_available_min_gib": 1.5}, "VllmNodeMemoryLow"),
    ({"vllm_monitoring_restarts_max": 3}, "VllmRestartsHigh"),
    ({"vllm_monitoring_down_for_s": 240}, "VllmEndpointDown"),
    ({"vllm_monitoring_decode_min_ratio": 0.3}, "VllmDecodeSlow"),
])
def test_the_promtool_tests_depend_on_the_thresholds(tmp_path, overrides, alert):
    """A threshold moved past the test's series makes its firing case fail: the tests judge the rendered values."""
    rc, out = _run_alert_tests(tmp_path, **overrides)
    assert rc != 0 and alert in out, out


@needs_promtool
@pytest.mark.parametrize("api_key", ["", "s3cret-key-for-the-test"], ids=["no-key", "key"])
def test_prometheus_yml_scrapes_the_head_and_every_node(tmp_path, api_key):
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    shutil.copy(os.path.join(ROLE, "files", "dgxspark-vllm-recording.yml"), rules_dir)
    key_file = tmp_path / "api-key"
    key_file.write_text(api_key)
    text = render("prometheus.yml.j2", vllm_api_key=api_key, vllm_monitoring_rules_dir=str(rules_dir),
                  vllm_monitoring_api_key_file=str(key_file), vllm_monitoring_listen_host="0.0.0.0")
    (tmp_path / "prometheus.yml").write_text(text)
    rc, out = promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert rc == 0, out
    jobs = {j["job_name"]: j for j in yaml.safe_load(text)["scrape_configs"]}
    assert jobs["vllm"]["static_configs"] == [{"targets": ["10.0.0.1:8000"], "labels": {"node": "spark-a"}}]
    assert [(c["targets"], c["labels"]["node"]) for c in jobs["node"]["static_configs"]] == [
        (["10.0.0.1:9100"], "spark-a"), (["10.0.0.2:9100"], "spark-b"), (["[fd00::3]:9100"], "spark-c")]
    assert jobs["prometheus"]["static_configs"] == [{"targets": ["localhost:9090"]}]
    if api_key:
        assert jobs["vllm"]["authorization"] == {"type": "Bearer", "credentials_file": str(key_file)}
        assert api_key not in text
    else:
        assert "authorization" not in jobs["vllm"]


def test_arguments_files():
    prom = render("prometheus.default.j2", vllm_monitoring_listen_host="127.0.0.1", vllm_monitoring_port=9091,
                  vllm_monitoring_retention_days=30)
    assert prom.splitlines()[-1] == ('ARGS="--config.file=/etc/prometheus/prometheus.yml '
                                     '--web.listen-address=127.0.0.1:9091 --storage.tsdb.retention.time=30d"')
    node = render("prometheus-node-exporter.default.j2")
    assert node.splitlines()[-1] == ('ARGS="--web.listen-address=:9100 '
                                     '--collector.textfile.directory=/var/lib/dgxspark-vllm-watchdog"')
    moved = render("prometheus-node-exporter.default.j2", vllm_watchdog_textfile_dir="/var/lib/node-textfile")
    assert moved.splitlines()[-1].endswith('--collector.textfile.directory=/var/lib/node-textfile"')


def test_every_dashboard_panel_draws_recording_rules():
    """The Grafana dashboard (roles/vllm_monitoring/files/grafana-dashboard.json) queries only the role's recording
    rules, and every recording rule is drawn by some panel."""
    import json
    with open(os.path.join(ROLE, "files", "grafana-dashboard.json")) as f:
        dash = json.load(f)
    with open(os.path.join(ROLE, "files", "dgxspark-vllm-recording.yml")) as f:
        recorded = {r["record"] for g in yaml.safe_load(f)["groups"] for r in g["rules"]}
    drawn = set()
    for panel in dash["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"] in recorded, (panel["title"], target["expr"])
            drawn.add(target["expr"])
    assert recorded - drawn == set()
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
