# Offline stand-in for the get-pip.py that ansible-test downloads from
# ci-files.testing.ansible.com (unreachable from our build machines). ansible-test runs it
# as `python get_pip.py [pip options] pip==X`; we bootstrap pip with ensurepip and let pip
# install the pinned version from PyPI. get-pip's own flags are dropped.
import ensurepip
import subprocess
import sys

GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}

ensurepip.bootstrap(upgrade=True)
args = [a for a in sys.argv[1:] if a not in GET_PIP_ONLY]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args))
