"""A finished run's record (``run_record``), shared by the log line, the HTTP route and the panel;
``strict_json``: everything published is strict JSON.

Built from what ``sampling`` observed (the arrow runs one way: ``sampling`` never imports the record). Never
imports a method (``dbcache``, ``forecast``): a method's words and its own parts come from its plan
(``sampling.seam.RunPlan``).
"""
