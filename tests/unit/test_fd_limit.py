"""The daemon's open-file limit: raised toward the hard limit before it serves (each locally read
block holds three descriptors), never above it, and left alone when already high enough."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, resource
soft, hard = {soft}, {hard}
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
from hdfsfuse.daemon import raise_fd_limit
got = raise_fd_limit({wanted})
print(json.dumps([got, *resource.getrlimit(resource.RLIMIT_NOFILE)]))
"""


def _probe(soft: int, hard: int, wanted: int) -> list[int]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(soft=soft, hard=hard, wanted=wanted)],
                         capture_output=True, text=True, check=True).stdout
    return list(json.loads(out))


@pytest.mark.parametrize(("soft", "hard", "wanted", "expected"), [
    (256, 4096, 2048, 2048),  # raised to what the daemon asks for
    (256, 1000, 2048, 1000),  # never above the hard limit
    (3000, 4096, 2048, 3000),  # already higher: left alone
])
def test_the_soft_limit_is_raised_within_the_hard_one(soft: int, hard: int, wanted: int, expected: int) -> None:
    import resource
    if hard > resource.getrlimit(resource.RLIMIT_NOFILE)[1]:
        pytest.skip("this process's hard limit is below the probe's")
    assert _probe(soft, hard, wanted) == [expected, expected, hard]
