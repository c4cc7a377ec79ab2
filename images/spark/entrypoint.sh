#!/bin/bash
# /opt/entrypoint.sh of the GIC Spark base image: the container contract Spark's
# Kubernetes backend relies on (the same one the official Spark images keep).
#
#   entrypoint.sh driver ARGS...     spark-submit in client deploy mode, bound to the pod's
#                                    address: --conf spark.driver.bindAddress=
#                                    $SPARK_DRIVER_BIND_ADDRESS, which executors are also
#                                    told as SPARK_DRIVER_POD_IP, then ARGS
#   entrypoint.sh executor           the executor JVM (KubernetesExecutorBackend) as the
#                                    executor pod's variables describe it: SPARK_DRIVER_URL,
#                                    SPARK_EXECUTOR_ID, _CORES, _MEMORY, _POD_IP, _POD_NAME,
#                                    SPARK_APPLICATION_ID, SPARK_RESOURCE_PROFILE_ID, and JVM
#                                    options SPARK_JAVA_OPT_0, _1, ... in that order
#   entrypoint.sh COMMAND ARGS...    any other command runs as given
#
# driver and executor run under tini (signals forwarded, zombies reaped) and, when the
# container runs as root, as the spark user (uid 185). A uid without a passwd entry (an
# arbitrary runAsUser) gets one through nss_wrapper, since the JVM and Hadoop's user
# lookup fail without it. The variables are passed on as they are: a missing or wrong one
# is reported by the JVM, as Spark would report it, not by this script.
#
# Classpath, in order: $SPARK_CONF_DIR (else $SPARK_HOME/conf), $SPARK_HOME/jars/*,
# $SPARK_EXTRA_CLASSPATH, the working directory, then $SPARK_DIST_CLASSPATH.
set -eo pipefail

SPARK_HOME=${SPARK_HOME:-/opt/spark}
SPARK_UID=185

java_bin() {
    if [ -n "${JAVA_HOME:-}" ]; then
        echo "$JAVA_HOME/bin/java"
    else
        command -v java
    fi
}

executor_classpath() {
    local cp=${SPARK_CONF_DIR:-$SPARK_HOME/conf}
    [ -n "${HADOOP_CONF_DIR:-}" ] && cp=$HADOOP_CONF_DIR:$cp
    cp=$cp:$SPARK_HOME/jars/*
    [ -n "${SPARK_EXTRA_CLASSPATH:-}" ] && cp=$cp:$SPARK_EXTRA_CLASSPATH
    cp=$cp:$PWD
    [ -n "${SPARK_DIST_CLASSPATH:-}" ] && cp=$cp:$SPARK_DIST_CLASSPATH
    echo "$cp"
}

# The values of SPARK_JAVA_OPT_<n>, by n (0, 1, ..., 10: numerically, not as text).
java_options() {
    local name
    while IFS= read -r name; do
        [ -n "$name" ] && printf '%s\0' "${!name}"
    done < <(compgen -v SPARK_JAVA_OPT_ | grep -E '^SPARK_JAVA_OPT_[0-9]+$' | sort -t_ -k4,4n)
}

passwd_entry() {
    local uid gid lib
    uid=$(id -u)
    getent passwd "$uid" >/dev/null 2>&1 && return 0
    gid=$(id -g)
    for lib in /usr/lib/*/libnss_wrapper.so /usr/lib/libnss_wrapper.so; do
        [ -s "$lib" ] || continue
        NSS_WRAPPER_PASSWD=$(mktemp)
        NSS_WRAPPER_GROUP=$(mktemp)
        printf 'spark:x:%s:%s:%s:%s:/bin/false\n' "$uid" "$gid" "${SPARK_USER_NAME:-anonymous uid}" \
            "$SPARK_HOME" >"$NSS_WRAPPER_PASSWD"
        printf 'spark:x:%s:\n' "$gid" >"$NSS_WRAPPER_GROUP"
        export LD_PRELOAD=$lib NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP
        return 0
    done
}

# Runs "$@" under tini, as the spark user when started as root.
launch() {
    passwd_entry
    if [ "$(id -u)" = 0 ]; then
        exec setpriv --reuid="$SPARK_UID" --regid="$SPARK_UID" --clear-groups \
            /usr/bin/tini -s -- "$@"
    fi
    exec /usr/bin/tini -s -- "$@"
}

case "${1:-}" in
    driver)
        shift
        launch "$SPARK_HOME/bin/spark-submit" \
            --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:-}" \
            --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS:-}" \
            --deploy-mode client "$@"
        ;;
    executor)
        shift
        mapfile -d '' options < <(java_options)
        launch "$(java_bin)" "${options[@]}" \
            "-Xms${SPARK_EXECUTOR_MEMORY:-}" "-Xmx${SPARK_EXECUTOR_MEMORY:-}" \
            -cp "$(executor_classpath)" \
            org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
            --driver-url "${SPARK_DRIVER_URL:-}" \
            --executor-id "${SPARK_EXECUTOR_ID:-}" \
            --cores "${SPARK_EXECUTOR_CORES:-}" \
            --app-id "${SPARK_APPLICATION_ID:-}" \
            --hostname "${SPARK_EXECUTOR_POD_IP:-}" \
            --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-}" \
            --podName "${SPARK_EXECUTOR_POD_NAME:-}"
        ;;
    "")
        echo "usage: entrypoint.sh driver SPARK-SUBMIT-ARGS... | executor | COMMAND ARGS..." >&2
        exit 2
        ;;
    *)
        exec "$@"
        ;;
esac
