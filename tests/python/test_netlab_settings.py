"""mccl netlab's host settings that need no root: checked against a
stand-in /proc directory."""

import pytest

from mccl.netlab import LabError, _allow_congestion


def test_congestion_control_is_added_to_the_allowed_list(tmp_path):
    # A stand-in for /proc/sys/net/ipv4 as the H200 box has it: cubic built
    # in, namespaces allowed only reno and bbr.
    (tmp_path / "tcp_available_congestion_control").write_text("reno bbr cubic\n")
    allowed = tmp_path / "tcp_allowed_congestion_control"
    allowed.write_text("reno bbr\n")
    _allow_congestion("cubic", str(tmp_path))
    assert allowed.read_text().split() == ["reno", "bbr", "cubic"]
    _allow_congestion("reno", str(tmp_path))  # already allowed: unchanged
    assert allowed.read_text().split() == ["reno", "bbr", "cubic"]
    with pytest.raises(LabError, match=r"'nosuchcc' is not available.*reno bbr cubic"):
        _allow_congestion("nosuchcc", str(tmp_path))
    assert allowed.read_text().split() == ["reno", "bbr", "cubic"]
