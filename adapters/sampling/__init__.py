"""What every method's run shares on the way from the sampler to the model.

- ``seam``: the method seam, declared: a method's plan (``RunPlan``), and what the nodes use of a run
  (``Run``, ``CallRoute``);
- ``sampling_run``: ``SamplingRun``, the abstract base every method's run implements (per call: step,
  stream, text path, foreign serves, timing; the observation at the end);
- ``step_clock``: which sampling step a model call belongs to;
- ``call_router``: each call's CFG stream and context, or an extra call computed in full;
- ``multi_device``: a run per device copy and one decision per step for all of them;
- ``observation``: what a run saw, handed out when it ends; ``stream_report``: each stream's account of it;
- ``text_path``, ``foreign_serves``, ``block_count``: the family's text path computed once per batch of
  conds, calls another step cache answered, blocks that ran.
"""
