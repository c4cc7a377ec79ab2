"""What a GICJob's ``sparkConf`` may not carry in its values: settings smuggled through JVM
options, heap sizes, options read from files, and secrets.

:func:`java_options_problem` judges ``spark.{driver,executor}.extraJavaOptions`` the way
the JVM will see them: the value is split as Spark splits it (both of Spark's splitters,
:mod:`gic_operator.java_options`), and every resulting argument is judged after quotes and
escapes are gone, so ``-D"spark.x=y"`` is ``-Dspark.x=y`` and ``-X'mx64g'`` is ``-Xmx64g``.
Refused, each with what to do instead:

* ``-D<key>`` where ``<key>`` starts with ``spark.``: the JVM makes it a system property
  and Spark reads every ``spark.*`` property as a setting, past the sparkConf allowlist;
* heap and memory sizing (``-Xmx``, ``-Xms``, ``-XX:MaxHeapSize`` and the other
  ``-XX:`` heap and RAM options): the spec's memory fields decide them, and the pod's
  memory limit is derived from them;
* options read from files the operator cannot check (``@argfile``, ``-XX:Flags=``,
  ``-XX:VMOptionsFile=``);
* ``-D<key>`` whose key holds a secret (:func:`secret_name`, and :data:`SECRET_PROPERTIES`
  such as ``javax.net.ssl.keyStorePassword``): a sparkConf value is plain text in the pod's
  command, readable by anyone who may read the pod;
* an argument with a control character (a newline inside quotes would become two options
  where Spark writes executors' options one per line), and a value Spark's launcher cannot
  split (an unterminated quote, a trailing backslash).

:func:`secret_name` is the rule for keys: a sparkConf key, or a ``-D`` property, whose name
says it holds a secret (``secret``, ``password``, ``passphrase``, ``token``,
``credential(s)``, ``<access|secret|encryption|account|private|session|signing|api>.key``)
is refused, unless its last part names how to find a secret rather than the secret itself
(:data:`NOT_SECRET_SUFFIXES`, e.g. ``fs.s3a.aws.credentials.provider``).

Pure functions over immutable tables; thread-safe.
"""

from __future__ import annotations

import re
import unicodedata

from gic_operator.java_options import OptionSyntaxError, executor_split, launcher_split

#: What a refused secret's message tells the user to do instead.
SECRET_ADVICE = (
    "pass secrets as variables with spec.application.env valueFrom.secretKeyRef (s3a and "
    "the AWS SDK read AWS_* variables themselves), or put storage credentials in the "
    "Secret named by spec.checkpointing.credentialsSecret"
)

_SECRET_WORDS = re.compile(
    r"(?i)(secret|passw|passphrase|token|credentials?(?![a-z])"
    r"|(?<![a-z])(access|secret|encryption|account|private|session|signing|api)[._-]?key(?![a-z]))"
)
#: Last parts of a key that name where or how a secret is found, not the secret.
NOT_SECRET_SUFFIXES = frozenset(
    {"provider", "providers", "type", "binding", "class", "impl", "enabled", "path"}
)
#: JVM system properties that hold secrets although their names do not say so.
SECRET_PROPERTIES = frozenset(
    {
        "aws.accesskeyid",
        "aws.secretkey",
        "aws.secretaccesskey",
        "aws.sessiontoken",
        "javax.net.ssl.keystorepassword",
        "javax.net.ssl.truststorepassword",
        "http.proxypassword",
        "https.proxypassword",
    }
)
#: ``-XX:`` options that size the heap or tell the JVM how much memory it has.
_MEMORY_XX = re.compile(r"^-XX:[+-]?\w*(HeapSize|RAM|ContainerSupport)")
_FILE_XX = re.compile(r"(?i)^-XX:(Flags|VMOptionsFile)=")


def secret_name(key: str) -> bool:
    """Whether ``key`` (a sparkConf key or a JVM property) names a secret (module docstring)."""
    if key.lower() in SECRET_PROPERTIES:
        return True
    last = re.split(r"[._-]", key)[-1].lower()
    return bool(_SECRET_WORDS.search(key)) and last not in NOT_SECRET_SUFFIXES


def _shown(arg: str) -> str:
    """``arg`` as a message may quote it: its option name only (never a value, which may be
    a secret), control characters replaced, at most 80 characters."""
    name = arg.split("=", 1)[0]
    clean = "".join("?" if unicodedata.category(c)[0] == "C" else c for c in name)
    return clean if len(clean) <= 80 else clean[:77] + "..."


def java_option_problem(arg: str) -> str | None:
    """Why the JVM argument ``arg`` (already split, quotes removed) is refused, or ``None``.
    The message names the option, never its value."""
    shown = _shown(arg)
    if any(unicodedata.category(c) == "Cc" and c not in " \t" for c in arg):
        return (
            f"{shown}: holds a control character (a line break inside quotes becomes a "
            "second option); write the options without line breaks inside one"
        )
    if arg.startswith("-D"):
        key = arg[2:].split("=", 1)[0]
        if not key:
            return "-D without a name in the same argument sets no property; write -Dname=value"
        if key.lower().startswith("spark."):
            return (
                f"{shown} sets the Spark setting {key[:80]} as a JVM property, which Spark "
                "reads past the sparkConf allowlist; set allowed settings as sparkConf entries"
            )
        if secret_name(key):
            return (
                f"{shown} holds a secret, and sparkConf values are plain text in the pod's "
                f"command; {SECRET_ADVICE}"
            )
        return None
    if arg.lower().startswith(("-xmx", "-xms")) or _MEMORY_XX.match(arg):
        return (
            f"{shown} sizes the heap or the JVM's memory: use the spec's memory fields "
            "(driver.memory, executor.memory), from which the pod's memory limit is derived"
        )
    if arg.startswith("@") or _FILE_XX.match(arg):
        return f"{shown} reads more options from a file, which GIC cannot check; write them out"
    return None


def java_options_problem(value: str) -> str | None:
    """Why ``value`` of ``spark.{driver,executor}.extraJavaOptions`` is refused, or
    ``None``: the first refused argument of either of Spark's splits of it."""
    try:
        args = launcher_split(value)
    except OptionSyntaxError as exc:
        return (
            f"is refused: Spark's launcher cannot split it (it has {exc}); close every "
            "quote and end it with no backslash"
        )
    for arg in (*args, *executor_split(value)):
        problem = java_option_problem(arg)
        if problem is not None:
            return f"is refused: {problem}"
    return None
