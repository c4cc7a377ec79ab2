import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Collections;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.TreeSet;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;

import org.apache.spark.internal.config.ConfigEntry;
import org.apache.spark.network.util.ConfigProvider;
import org.apache.spark.network.util.TransportConf;

/**
 * Prints, one per line and sorted, every Spark setting the Spark jars in a directory define.
 *
 * <p>Usage: {@code java -cp 'JARS/*' ListSparkSettings.java JARS}. Spark registers each
 * {@code ConfigEntry} (core, SQL, Kubernetes, Hive, ...) in {@code ConfigEntry}'s registry when
 * the Scala object that declares it is initialized, so every top-level Scala object in the
 * {@code spark-*.jar} files is initialized first; then the registry's keys and their alternative
 * (older) names are printed. The network layer's settings ({@code spark.<module>.io.*} and the
 * like) are not entries: they are read by {@code TransportConf} by name, so a {@code TransportConf}
 * for each of Spark's transport modules is built on a provider that records every name asked
 * for, and each of its getters is called once.
 */
public final class ListSparkSettings {
  private static final String[] TRANSPORT_MODULES = {"rpc", "shuffle", "files"};

  private ListSparkSettings() {}

  public static void main(String[] args) throws Exception {
    Path jars = Paths.get(args[0]);
    ClassLoader loader = ListSparkSettings.class.getClassLoader();
    try (DirectoryStream<Path> found = Files.newDirectoryStream(jars, "spark-*.jar")) {
      for (Path jar : found) {
        initializeScalaObjects(jar, loader);
      }
    }
    TreeSet<String> keys = new TreeSet<>();
    for (ConfigEntry<?> entry : ConfigEntry.listAllEntries()) {
      keys.add(entry.key());
      keys.addAll(scala.jdk.javaapi.CollectionConverters.asJava(entry.alternatives()));
    }
    for (String module : TRANSPORT_MODULES) {
      keys.addAll(transportSettings(module));
    }
    for (String key : keys) {
      if (key.startsWith("spark.")) {
        System.out.println(key);
      }
    }
  }

  /** Initializes every top-level Scala object (a class named {@code X$}) in {@code jar}. */
  private static void initializeScalaObjects(Path jar, ClassLoader loader) throws Exception {
    try (JarFile file = new JarFile(jar.toFile())) {
      for (JarEntry entry : Collections.list(file.entries())) {
        String name = entry.getName();
        if (!name.endsWith("$.class") || name.indexOf('$') != name.length() - 7) {
          continue;
        }
        String className = name.substring(0, name.length() - 6).replace('/', '.');
        try {
          Class.forName(className, true, loader);
        } catch (Throwable ignored) {
          // an object that cannot initialize outside a running Spark declares no settings
        }
      }
    }
  }

  /** The names a {@code TransportConf} for {@code module} reads. */
  private static TreeSet<String> transportSettings(String module) {
    TreeSet<String> asked = new TreeSet<>();
    ConfigProvider recorder =
        new ConfigProvider() {
          @Override
          public String get(String name) {
            asked.add(name);
            throw new NoSuchElementException(name);
          }

          @Override
          public Iterable<Map.Entry<String, String>> getAll() {
            return Collections.emptyList();
          }
        };
    TransportConf conf = new TransportConf(module, recorder);
    for (Method method : TransportConf.class.getMethods()) {
      if (method.getParameterCount() == 0
          && !Modifier.isStatic(method.getModifiers())
          && method.getDeclaringClass() == TransportConf.class) {
        try {
          method.invoke(conf);
        } catch (Throwable ignored) {
          // a getter that needs a value it was not given has still asked for its name
        }
      }
    }
    return asked;
  }
}
