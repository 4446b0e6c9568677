"""Plain Python that runs inside Spark tasks; never imports a SparkSession."""
