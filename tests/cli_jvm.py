"""The driver JVM of the ``deltacrawl`` processes a test starts itself (crash, lease, Airflow, cluster).

Each such process is a cold JVM that plans a few small rounds and exits, the case
``spark.driver_java_options`` names in ``conf/defaults.toml``: HotSpot's quick C1 compiler only.
Measured with cold CLI verbs on a 6-host test web (``init`` .. ``update``, alternated, two pairs, load
10-18): 357 and 372 s against 573 and 580 s with the JVM's default tiered compilation. The suite's own
in-process session keeps the default (it lives for the whole run, where the optimising compiler pays).
"""

DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"

#: A line for the ``[spark]`` table of a test's configuration overlay.
SPARK_LINE = f'driver_java_options = "{DRIVER_JAVA_OPTIONS}"\n'
