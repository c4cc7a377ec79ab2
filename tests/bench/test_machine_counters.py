"""The machine's paging counters a state-sweep run records (``notes["paging"]``)."""

from __future__ import annotations

from pathlib import Path

from bench.streaming.machine_counters import (
    FIELDS,
    PagingCounters,
    deltas,
    parse_vmstat,
    read_vmstat,
)

SAMPLE = "nr_free_pages 1234\npgpgin 100\npgpgout 250\npgfault 9\npgmajfault 7\nbogus x\n"


def test_only_the_paging_counters_are_read() -> None:
    assert parse_vmstat(SAMPLE) == {"pgpgin": 100, "pgpgout": 250, "pgmajfault": 7}


def test_a_counter_missing_on_either_side_is_left_out_and_a_reset_counts_from_zero() -> None:
    before = {"pgpgin": 100, "pgmajfault": 7}
    after = {"pgpgin": 40, "pgmajfault": 19, "pgpgout": 5}
    assert deltas(before, after) == {"pgpgin": 40, "pgmajfault": 12}


def test_the_block_gets_the_growth_of_each_counter(tmp_path: Path) -> None:
    vmstat = tmp_path / "vmstat"
    vmstat.write_text(SAMPLE)
    with PagingCounters(vmstat) as counters:
        assert counters.deltas == {}
        vmstat.write_text(SAMPLE.replace("pgmajfault 7", "pgmajfault 1007"))
    assert counters.deltas == {"pgpgin": 0, "pgpgout": 0, "pgmajfault": 1000}


def test_an_unreadable_file_gives_no_counters(tmp_path: Path) -> None:
    with PagingCounters(tmp_path / "missing") as counters:
        pass
    assert counters.deltas == {}


def test_this_machine_has_every_counter() -> None:
    assert set(read_vmstat()) == set(FIELDS)
