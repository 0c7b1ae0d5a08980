"""What a run tells the tools that watch it: OpenLineage events for a lineage catalog
(:mod:`diffcdc.observe.lineage`) and a Prometheus metrics file for alerting
(:mod:`diffcdc.observe.metrics`), both built from the facts a run already records
(:mod:`diffcdc.observe.run_facts`). Neither ever changes a run's outcome: a receiver that is
down or a file that cannot be written is one warning line.
"""
