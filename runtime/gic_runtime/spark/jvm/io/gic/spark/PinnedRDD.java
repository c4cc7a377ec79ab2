package io.gic.spark;

import java.util.Collections;
import java.util.List;

import org.apache.spark.Partition;
import org.apache.spark.TaskContext;
import org.apache.spark.rdd.RDD;
import scala.collection.Iterator;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag;

/**
 * Passes its parent's partitions through unchanged and reports one preferred location per
 * partition, so the scheduler runs partition i where its state is.
 *
 * <p>Invariant: the rows of partition i are exactly the parent's rows of partition i, in
 * order; only scheduling differs. A location is Spark's executor form
 * {@code executor_<host>_<executorId>}; an empty string means no preference.
 */
public final class PinnedRDD<T> extends RDD<T> {
  private static final long serialVersionUID = 1L;

  private final ClassTag<T> tag;
  private final String[] locations;

  public PinnedRDD(RDD<T> parent, String[] locations, ClassTag<T> tag) {
    super(parent, tag);
    this.tag = tag;
    this.locations = locations.clone();
  }

  @Override
  public Iterator<T> compute(Partition split, TaskContext context) {
    return firstParent(tag).iterator(split, context);
  }

  @Override
  public Partition[] getPartitions() {
    return firstParent(tag).partitions();
  }

  @Override
  public Seq<String> getPreferredLocations(Partition split) {
    int index = split.index();
    List<String> out =
        index < locations.length && !locations[index].isEmpty()
            ? Collections.singletonList(locations[index])
            : Collections.<String>emptyList();
    return CollectionConverters.asScala(out).toSeq();
  }
}
