# Offline stand-in for the get-pip.py that ansible-test downloads from
# ci-files.testing.ansible.com (unreachable from our build machines). ansible-test runs it
# as `python get_pip.py [pip options] pip==X` inside a fresh venv; we bootstrap pip with
# ensurepip and let pip install the pinned version from PyPI. get-pip's own flags are dropped.
import ensurepip
import os
import subprocess
import sys

GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}
# PyPI is reached through a TLS-intercepting proxy; ansible-test strips the environment, so
# point the venv's pip at the system CA bundle in the venv's own pip.conf.
CA_BUNDLES = ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"]

bundle = next((p for p in CA_BUNDLES if os.path.exists(p)), None)
if bundle:
    with open(os.path.join(sys.prefix, "pip.conf"), "w") as f:
        f.write("[global]\ncert = %s\n" % bundle)
ensurepip.bootstrap(upgrade=True)
args = [a for a in sys.argv[1:] if a not in GET_PIP_ONLY]
if bundle:
    args = ["--cert", bundle] + args
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args))
