"""Spark, as diffcdc uses it: :mod:`~diffcdc.spark.session` builds a session (classic, or Spark
Connect through :mod:`~diffcdc.spark.connect`, which also watches its server) with the settings of
:mod:`~diffcdc.spark.settings`; :mod:`~diffcdc.spark.paths` gives paths as Spark takes them;
:mod:`~diffcdc.spark.per_session` keeps what is cached per session for as long as it lives.
:mod:`~diffcdc.spark.version` says which PySpark runs and whether diffcdc runs on it;
:mod:`~diffcdc.spark.compat` holds what differs between those versions.

This package itself imports nothing: the command line imports :mod:`~diffcdc.spark.version`
before pyspark, to say in one line which PySpark is needed when none (or an unsupported one) is
installed."""
