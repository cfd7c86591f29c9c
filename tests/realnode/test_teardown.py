"""Last in the real-node suite: stopping the node leaves nothing behind on this machine."""
from __future__ import annotations

import pytest

from tests.realnode.conftest import RELEASE

pytestmark = pytest.mark.cluster


def test_stopping_the_real_node_leaves_nothing_behind(kubectl, helm_real, real_node, chart_operator):
    helm_real("uninstall", RELEASE, f"--namespace={chart_operator}", "--wait")
    real_node.down()
    assert real_node.leftovers() == []
    assert kubectl("get", "node", real_node.NODE, check=False).returncode != 0, "the Node object is gone"
    assert not real_node.healthy()
