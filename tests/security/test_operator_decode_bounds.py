"""Hostile manifests do not take the shared operator's memory.

A driver runs the tenant's code and may write any manifest into its job's directory.
The operator reads them in every recovery pass (the observer's restore-source check,
the claim, the orphan sweep). Bytes read were bounded already; here the memory they
decode into is: a 16 MiB manifest naming hundreds of thousands of objects and handles,
a 6 MiB one of two million empty JSON objects, and two dozen retained manifests of 25,000
distinct objects each are fed to the operator's pass in a separate process, and its
peak resident memory must stay far below the chart's 512Mi limit (the issue measured
+544 MiB from one such manifest). Each hostile file is refused as a corrupt file naming
it, and nothing is deleted.

Every decode failure (size, JSON values, buckets, objects, tokens) is a
``CorruptFileError`` naming the file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gic_runtime.checkpoint.manifest_codec import decode_manifest
from gic_runtime.checkpoint.manifest_limits import OPERATOR_LIMITS, json_value_bound
from gic_runtime.errors import CorruptFileError
from gic_runtime.formats import encode_text_record

JOB = "team.wc"
CHILD = Path(__file__).with_name("operator_pass_memory.py")
#: Peak memory one operator pass may add (the chart's limit is 512Mi).
MAX_GROWTH_MIB = 64


def body(checkpoint: int, names: list[str], *, buckets: int = 1) -> dict[str, Any]:
    """A v2 manifest body whose bucket 0 holds one changelog handle per name."""
    rows: list[int] = []
    for index in range(len(names)):
        rows += [index, 0, 1, 0, 1]
    entries = [
        {
            "bucket": 0,
            "seq": len(names),
            "token": 0,
            "snapshot": None,
            "changelog": rows,
            "crc": "00000000" * len(names),
        }
    ]
    entries += [
        {"bucket": b, "seq": 0, "token": 0, "snapshot": None, "changelog": [], "crc": ""}
        for b in range(1, buckets)
    ]
    return {
        "job_id": JOB,
        "checkpoint_id": checkpoint,
        "epoch": 1,
        "created_at": 1.0,
        "num_buckets": buckets,
        "kind": "checkpoint",
        "savepoint": None,
        "restored_from": None,
        "base": "..",
        "engine": {},
        "sink": {},
        "objects": names,
        "tokens": ["t"],
        "buckets": entries,
    }


def encode(obj: dict[str, Any]) -> bytes:
    text = json.dumps(obj, separators=(",", ":"), sort_keys=True)
    return encode_text_record("GICM", 2, text.encode("ascii"))


def manifest_uri(root: Path, checkpoint: int) -> str:
    return f"file://{root}/jobs/{JOB}/checkpoints/chk-{checkpoint:012d}.manifest"


def put_manifest(root: Path, checkpoint: int, data: bytes) -> Path:
    path = root / "jobs" / JOB / "checkpoints" / f"chk-{checkpoint:012d}.manifest"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def segment_names(count: int, prefix: str = "s") -> list[str]:
    return [f"changelog/0/{prefix}{i:09d}.seg" for i in range(count)]


def huge_objects(root: Path) -> str:
    """One 16 MiB manifest: 330,000 distinct objects, one handle each."""
    data = encode(body(1, segment_names(330_000)))
    assert 15 << 20 < len(data) < 17 << 20
    put_manifest(root, 1, data)
    return "chk-000000000001.manifest"


def tiny_objects(root: Path) -> str:
    """A 6 MiB manifest (under the operator's byte bound) of two million empty objects."""
    obj = body(1, segment_names(1))
    obj["engine"] = {"junk": [{}] * 2_000_000}
    data = encode(obj)
    assert len(data) < OPERATOR_LIMITS.max_bytes
    put_manifest(root, 1, data)
    return "chk-000000000001.manifest"


def many_retained(root: Path) -> str:
    """24 retained manifests of 25,000 distinct objects each (about 1.4 MiB each)."""
    for checkpoint in range(1, 25):
        put_manifest(
            root, checkpoint, encode(body(checkpoint, segment_names(25_000, f"c{checkpoint}-")))
        )
    return "chk-0000000000"


def run_pass(root: Path, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "report.json"
    subprocess.run(
        [sys.executable, str(CHILD), str(root), JOB, str(out)],
        check=True,
        timeout=600,
        cwd=Path(__file__).parents[2],
    )
    report: dict[str, Any] = json.loads(out.read_text())
    return report


@pytest.mark.parametrize(
    "hostile", [huge_objects, tiny_objects, many_retained], ids=lambda f: f.__name__
)
def test_an_operator_pass_over_hostile_manifests_keeps_its_memory(
    tmp_path: Path, hostile: Callable[[Path], str]
) -> None:
    root = tmp_path / "store"
    named = hostile(root)
    orphan = root / "jobs" / JOB / "changelog" / "0" / "orphan.seg"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"x")
    report = run_pass(root, tmp_path)
    growth_mib = (report["after_kib"] - report["before_kib"]) / 1024
    steps = report["steps"]
    print(f"{hostile.__name__}: peak memory grew by {growth_mib:.1f} MiB")
    assert growth_mib < MAX_GROWTH_MIB, f"peak memory grew by {growth_mib:.0f} MiB: {steps}"
    assert "value" in steps["restore_released"], "an unreadable manifest: not released"
    sweep = steps["sweep_orphans"]
    assert sweep.get("corrupt_file") is True, sweep
    assert named in sweep["message"], "the error names the file"
    assert orphan.exists(), "nothing is deleted while a manifest cannot be read"


URI = "file:///data/gic/jobs/team.wc/checkpoints/chk-000000000001.manifest"


def _with(**changes: Any) -> bytes:
    obj = body(1, segment_names(2))
    obj.update(changes)
    return encode(obj)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"GICM 2 crc32c=00000000\n" + b" " * (OPERATOR_LIMITS.max_bytes + 1), "more than the"),
        (_with(engine={"junk": [0] * OPERATOR_LIMITS.max_values}), "JSON values"),
        (_with(buckets=[{}] * (OPERATOR_LIMITS.max_buckets + 1)), "bucket entries"),
        (_with(objects=segment_names(40)), "more than the 3 handles and snapshots"),
        (_with(tokens=["a", "b", "c"]), "3 tokens for 1 bucket entries"),
        (_with(objects=[7, 8]), "not a string"),
    ],
    ids=["bytes", "values", "buckets", "objects", "tokens", "type"],
)
def test_every_decode_bound_is_a_corrupt_file_naming_it(data: bytes, message: str) -> None:
    with pytest.raises(CorruptFileError, match=message) as caught:
        decode_manifest(data, URI, limits=OPERATOR_LIMITS)
    assert caught.value.uri == URI


def test_the_value_bound_never_undercounts() -> None:
    samples: list[Any] = [[], {}, [[]], {"a": [1, {"b": "x,y:[{"}]}, [0] * 1000, "s", 1]
    for value in samples:
        text = json.dumps(value).encode()
        assert json_value_bound(text) >= _values(value)


def _values(value: Any) -> int:
    if isinstance(value, list):
        return 1 + sum(_values(v) for v in value)
    if isinstance(value, dict):
        return 1 + len(value) + sum(_values(v) for v in value.values())
    return 1


def test_an_ordinary_manifest_decodes_within_the_operator_limits() -> None:
    manifest = decode_manifest(encode(body(1, segment_names(3))), URI, limits=OPERATOR_LIMITS)
    assert len(manifest.uris()) == 3
    assert all(u.startswith("file:///data/gic/jobs/team.wc/changelog/0/") for u in manifest.uris())
