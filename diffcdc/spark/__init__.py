"""Spark, as diffcdc uses it: :mod:`~diffcdc.spark.session` builds a session (classic, or Spark
Connect through :mod:`~diffcdc.spark.connect`, which also watches its server) with the settings of
:mod:`~diffcdc.spark.settings`; :mod:`~diffcdc.spark.paths` gives paths as Spark takes them;
:mod:`~diffcdc.spark.per_session` keeps what is cached per session for as long as it lives."""
