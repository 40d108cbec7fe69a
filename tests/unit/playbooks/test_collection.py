"""The collection builds, installs and documents itself; both entry points parse (issue 2)."""
import glob
import hashlib
import os
import shutil
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.path.dirname(sys.executable)


def _run(args, cwd=ROOT, env=None):
    e = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"], ANSIBLE_NOCOLOR="1")
    e.update(env or {})
    proc = subprocess.run(args, cwd=cwd, env=e, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_site_syntax_from_checkout_and_by_fqcn():
    _run(["ansible-playbook", "site.yml", "--syntax-check"])
    _run(["ansible-playbook", "dgxspark.vllm.site", "--syntax-check"])


def test_built_collection_installs_and_documents_preflight(tmp_path):
    _run(["ansible-galaxy", "collection", "build", "--output-path", str(tmp_path)])
    tarballs = glob.glob(str(tmp_path / "dgxspark-vllm-*.tar.gz"))
    assert len(tarballs) == 1
    listing = subprocess.run(["tar", "-tzf", tarballs[0]], capture_output=True, text=True,
                             check=True).stdout.split()
    assert "roles/preflight/meta/argument_specs.yml" in listing
    assert "lanes/sim_cpu_tp2.yml" in listing
    assert not [p for p in listing if p.startswith((".venv", ".sim", "collections/", "tests/output"))], listing[:20]
    # galaxy.yml build_ignore: what only the repository needs stays out of the tarball (issue 31) ...
    repo_only = ("tests/", "molecule/", "benchmarks/", ".ci/", "library/", "reports/", "inventories/sim/",
                 "inventories/sim_tp3/", "inventories/sim_faults/", "Makefile", "ansible.cfg", "pytest.ini",
                 "requirements-dev.txt", ".yamllint", ".ansible-lint", ".gitignore", "tools/sanity.sh",
                 "tools/timed_stages.py", "tools/host-deps.sh")
    assert not [p for p in listing if p.startswith(repo_only)], [p for p in listing if p.startswith(repo_only)][:20]
    # ... and what installed playbooks read is still in it (sim_up.yml: sim_fleet and the tiny-model tool;
    # the sim lanes' fix file; the samples the README copies).
    for kept in ("LICENSE", "README.md", "playbooks/sim_up.yml", "roles/sim_fleet/tasks/main.yml",
                 "tools/make_tiny_model.py", "files/fixes/sparse_attn_indexer_kpool_sim.py",
                 "inventories/sample_tp2/hosts.yml", "docs/sources.md", "meta/runtime.yml"):
        assert kept in listing, kept
    dest = tmp_path / "installed"
    # An empty ansible.cfg keeps the checkout's config (and its self-link) out of the install and doc steps.
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    _run(["ansible-galaxy", "collection", "install", "--offline", "--force", "-p", str(dest), tarballs[0]],
         cwd=str(tmp_path), env={"ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg")})
    assert (dest / "ansible_collections" / "dgxspark" / "vllm" / "roles" / "preflight" / "meta"
            / "argument_specs.yml").is_file()
    doc = _run(["ansible-doc", "-t", "role", "dgxspark.vllm.preflight"], cwd=str(tmp_path),
               env={"ANSIBLE_COLLECTIONS_PATH": str(dest), "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg")})
    assert "ENTRY POINT: *lane*" in doc and "vllm_lane_overrides" in doc and "ENTRY POINT: *main*" in doc, doc
    # An installed user (issue 31): validate from an empty directory with no ansible.cfg, on the TP2 sample copied
    # there with its fix file supplied (a stand-in holding the marker) in files/ beside it and pinned; the plan lands
    # in that directory's reports/, named by its id, and nothing is written inside the installed collection.
    work = tmp_path / "empty"
    work.mkdir()
    coll = dest / "ansible_collections" / "dgxspark" / "vllm"
    inv = work / "mysite"
    shutil.copytree(str(coll / "inventories" / "sample_tp2"), str(inv))
    (inv / "files").mkdir()
    fix = b"# stand-in: multi_processor_count >= 78\n"
    (inv / "files" / "sparse_attn_indexer_kpool.py").write_bytes(fix)
    (inv / "group_vars" / "spark_cluster" / "pins.yml").write_text(
        "vllm_fix_file_sha256:\n  sparse_attn_indexer_kpool: %s\n" % hashlib.sha256(fix).hexdigest())
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("ANSIBLE_"))
    env.update(PATH=BIN + os.pathsep + os.environ["PATH"], ANSIBLE_NOCOLOR="1", ANSIBLE_COLLECTIONS_PATH=str(dest),
               PWD=str(work))
    proc = subprocess.run(["ansible-playbook", "-i", str(inv / "hosts.yml"),
                           "dgxspark.vllm.validate"], cwd=str(work), env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0, out[-3000:]
    saved = sorted(p.name for p in (work / "reports").iterdir())
    pid = [n[len("plan-"):-len(".md")] for n in saved if n != "plan-latest.md"][0]
    assert saved == ["plan-%s.md" % pid, "plan-latest.md"], saved
    assert "plan %s (2 nodes, lane tp2_dflash2_ct): %s/reports/plan-%s.md" % (pid, work, pid) in out, out[-2000:]
    page = (work / "reports" / "plan-latest.md").read_text()
    assert page.startswith("# Bring-up plan %s\n" % pid)
    assert "| node-a | 0 | head |" in page and "| node-b | 1 | worker (--headless) |" in page
    assert not list(coll.glob("**/reports")) and not (coll / ".sim").exists()
    assert "sparse_attn_indexer_kpool | tonyd2wild/GLM-5.3-Flash-NVFP4-DFlash2-2x-DGX-Spark, " \
           "docker/sparse_attn_indexer_kpool_sm121.py | %s... | present" % hashlib.sha256(fix).hexdigest()[:12] in out
