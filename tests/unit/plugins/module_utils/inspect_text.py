"""Test-only readers of captured `docker image inspect` text: a whole JSON list or an excerpt of its
lines ('"Key": value,' without the braces), handed to the production parser docker_cli.parse_image."""
import json

from ansible_collections.dgxspark.vllm.plugins.module_utils.docker_cli import parse_image
from ansible_collections.dgxspark.vllm.plugins.module_utils.image import ImageError


def strip_fixture_header(text):
    """Drop the leading '# ' metadata lines a capture carries (tests/fixtures/README)."""
    lines = text.splitlines()
    while lines and lines[0].startswith("# "):
        lines.pop(0)
    return "\n".join(lines)


def parse_image_inspect(text):
    body = strip_fixture_header(text).strip()
    if not body:
        raise ImageError("docker image inspect returned nothing")
    try:
        data = json.loads(body)
    except ValueError:
        data = json.loads("{" + body.rstrip(",") + "}")
    if isinstance(data, list):
        if not data:
            raise ImageError("docker image inspect returned an empty list (image absent)")
        data = data[0]
    return parse_image(data)
