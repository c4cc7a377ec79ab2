package io.gic.spark;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.apache.spark.SparkContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.storage.BlockManagerId;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

/**
 * What the Python driver calls through py4j to pin the stateful stage's partitions.
 *
 * <p>An instance (public no-argument constructor) so it can be created through any class
 * loader; it keeps no state.
 */
public final class Placement {
  public static final String VERSION = "1";

  public String version() {
    return VERSION;
  }

  /** The live executors as {@code executor_<host>_<id>}, sorted; the driver excluded. */
  public String[] executors(SparkContext sc) {
    List<String> out = new ArrayList<>();
    for (BlockManagerId id :
        CollectionConverters.asJava(sc.env().blockManager().master().getMemoryStatus())
            .keySet()) {
      if (!id.isDriver()) {
        out.add("executor_" + id.host() + "_" + id.executorId());
      }
    }
    Collections.sort(out);
    return out.toArray(new String[0]);
  }

  /**
   * {@code df} with the same rows per partition, whose partition i prefers {@code
   * locations[i]} (the query plan of {@code df} runs once, when the result is computed).
   */
  public Dataset<Row> pin(Dataset<Row> df, String[] locations) {
    org.apache.spark.sql.classic.Dataset<Row> classic =
        (org.apache.spark.sql.classic.Dataset<Row>) df;
    ClassTag<InternalRow> tag = ClassTag$.MODULE$.apply(InternalRow.class);
    PinnedRDD<InternalRow> pinned =
        new PinnedRDD<>(classic.queryExecution().toRdd(), locations, tag);
    return classic.sparkSession().internalCreateDataFrame(pinned, classic.schema(), false);
  }
}
