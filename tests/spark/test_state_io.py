"""Reading and writing state offline on real Spark: a word count's checkpoint read with
``read_state`` holds exactly the counts the job computed; a savepoint written with
``write_state`` from a changed DataFrame (another bucket count) starts a new job that
continues from the written counts; rows that do not fit fail the write, which leaves
nothing behind."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from gic_runtime.errors import StateError
from gic_runtime.spark import read_state, write_state
from gic_runtime.state.keys import bucket_for

from .test_word_count import run_wc, settings, sink_batches
from .words import write_text_batches


def totals(src: Path) -> Counter[str]:
    return Counter(w for f in sorted(src.glob("part-*.txt")) for w in f.read_text().split())


@pytest.mark.slow
def test_read_change_write_and_restore(spark: SparkSession, tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    write_text_batches(src, 3)
    s = settings(tmp_path)
    run_wc(spark, s, src, out)
    counted = totals(src)

    typed = read_state(spark, s.storage, job_id="wc", key_type="string", value_type="bigint")
    rows = typed.collect()
    assert {(r.state, r.kind) for r in rows} == {("agg:count", "value")}
    assert {r.key: r.value for r in rows} == dict(counted)
    assert all(r.bucket == bucket_for(r.key, 16) for r in rows)
    as_json = read_state(spark, s.storage, job_id="wc").where("key = '\"apple\"'").collect()
    assert [(r.value, r.value_msgpack is not None) for r in as_json] == [
        (str(counted["apple"]), True)
    ]

    changed = typed.select(
        "state",
        "kind",
        "key",
        F.when(F.col("key") == "apple", F.col("value") + 100)
        .otherwise(F.col("value"))
        .alias("value"),
    ).unionByName(
        spark.createDataFrame(
            [("agg:count", "value", "zebra", 7)],
            "state string, kind string, key string, value long",
        )
    )
    target = tmp_path / "written"
    index = write_state(changed, str(target), num_buckets=4, typed=["key"])
    assert index.num_buckets == 4 and (target / "_canonical.json").is_file()
    assert sum(f.rows for f in index.files) == len(counted) + 1
    written = read_state(spark, str(target), key_type="string", value_type="bigint").collect()
    assert {r.key: r.value for r in written} == {
        **counted,
        "apple": counted["apple"] + 100,
        "zebra": 7,
    }
    assert all(r.bucket == bucket_for(r.key, 4) for r in written)

    src2, out2 = tmp_path / "in2", tmp_path / "out2"
    src2.mkdir()
    (src2 / "part-00000.txt").write_text("apple zebra zebra\n")
    s2 = settings(tmp_path, job_id="wc2", num_buckets=4, restore_source=target.as_uri())
    run_wc(spark, s2, src2, out2)
    assert sink_batches(out2) == {0: {"apple": counted["apple"] + 101, "zebra": 9}}
    after = read_state(spark, s2.storage, job_id="wc2", key_type="string", value_type="long")
    expected = {**counted, "apple": counted["apple"] + 101, "zebra": 9}
    assert {r.key: r.value for r in after.collect()} == expected

    bad = typed.select("state", F.lit("map").alias("kind"), "key", "value")
    with pytest.raises(StateError, match="a map row needs its entry's user key: give user_key"):
        write_state(bad, str(tmp_path / "bad"), num_buckets=4, typed=["key"])
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").iterdir())
