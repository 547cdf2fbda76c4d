"""A finished run's record (``run_record``), shared by the log line, the HTTP route and the panel;
``stream_report``: each stream's entry; ``strict_json``: everything published is strict JSON.

Never imports a method (``dbcache``, ``forecast``): a method's own parts come from its plan.
"""
