"""In-flight markers: held while their holder lives, stale the moment it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from gic_runtime.materialization.background import wait_for_markers
from gic_runtime.materialization.markers import in_flight, take_marker

HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from gic_runtime.materialization.markers import take_marker
    held = take_marker(Path(sys.argv[1]))
    print("held" if held is not None else "refused", flush=True)
    time.sleep(600)
    """
)


def hold_in_child(path: Path) -> subprocess.Popen[str]:
    """A process that takes the marker at ``path`` and keeps it until killed."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "held"
    return child


def test_a_held_marker_is_in_flight_and_refused_to_others(tmp_path: Path) -> None:
    path = tmp_path / "m" / "bucket-00001.inflight"
    held = take_marker(path)
    assert held is not None and held.held
    assert in_flight(path)
    assert take_marker(path) is None  # another open file: refused, even in one process
    held.release()
    assert not path.exists() and not in_flight(path) and not held.held
    held.release()  # idempotent
    again = take_marker(path)
    assert again is not None
    again.release()


def test_a_killed_holders_marker_is_stale_at_once(tmp_path: Path) -> None:
    path = tmp_path / "bucket-00002.inflight"
    child = hold_in_child(path)
    try:
        assert in_flight(path)
        assert take_marker(path) is None
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert child.stdout is not None
        child.stdout.close()
    assert path.exists()  # left behind, as by kill -9
    assert not in_flight(path)
    took = take_marker(path)  # replaced, not refused for minutes
    assert took is not None and in_flight(path)
    took.release()


def test_an_unlocked_marker_file_is_stale(tmp_path: Path) -> None:
    path = tmp_path / "bucket-00003.inflight"
    path.write_text("123 1700000000.0\n")  # no process holds it
    assert not in_flight(path)
    took = take_marker(path)
    assert took is not None
    assert path.read_text().split()[0] == str(os.getpid())
    took.release()


def test_waiting_for_markers_does_not_wait_for_the_dead(tmp_path: Path) -> None:
    """After a crash, the next attempt's drain must not wait for the dead attempt's
    markers (it used to wait until they were ten minutes old)."""
    live = tmp_path / "bucket-00004.inflight"
    dead = tmp_path / "bucket-00005.inflight"
    child = hold_in_child(dead)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert child.stdout is not None
    child.stdout.close()
    start = time.monotonic()
    assert wait_for_markers(tmp_path, range(4, 6), timeout=30) == []
    assert time.monotonic() - start < 10
    held = take_marker(live)
    assert held is not None
    assert wait_for_markers(tmp_path, range(4, 6), timeout=0.2) == [4]
    held.release()


def test_of_processes_racing_for_a_marker_exactly_one_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "bucket-00006.inflight"
    race = textwrap.dedent(
        """
        import sys, time
        from pathlib import Path
        from gic_runtime.materialization.markers import take_marker
        start = float(sys.argv[2])
        while time.time() < start:
            pass
        held = take_marker(Path(sys.argv[1]))
        print("held" if held is not None else "refused", flush=True)
        sys.stdin.read()  # hold until every racer has answered
        """
    )
    start = str(time.time() + 1.5)
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", race, str(path), start],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    said = []
    for racer in racers:
        assert racer.stdout is not None
        said.append(racer.stdout.readline().strip())
    for racer in racers:
        racer.communicate(timeout=60)
    assert sorted(said) == ["held", "refused", "refused", "refused"]
    assert not in_flight(path)  # every racer is gone
