"""A call cache-dit served whose blocks never ran (another cache answered it) is not counted as cached,
and the rest of the run stays out of cache-dit; a run without a model call names no CFG mode.
(Another step cache seen before the run, by its state: ``test_step_cache_conflicts_comfyui.py``.)"""

from __future__ import annotations

from cache_runs import COND, FAST, SHAPE, SIGMAS, STEPS, Stream, forward, open_run, record_of

ANSWERED_ELSEWHERE = 2  # the step another cache answers (cache-dit's "fast" mask computes it)


def test_a_call_answered_without_the_model_is_not_counted_cached(transformer):
    stream = Stream(COND, 1)
    with open_run(transformer, FAST, conds_per_step=1) as run:
        for i in range(STEPS):
            with run.model_call(SIGMAS[i], [stream.branch], [stream.x.shape]):
                # Another cache between the call and the model: it answers one step itself.
                out = stream.outputs[-1] if i == ANSWERED_ELSEWHERE else forward(transformer, stream.x,
                                                                                stream.context, SIGMAS[i])
            stream.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))
    record = record_of(run)
    log = {call[0]: call for call in record.call_log}
    assert log[ANSWERED_ELSEWHERE][2:4] == [True, 0], "served to cache-dit, no block ran"
    assert ANSWERED_ELSEWHERE not in record.cached_steps
    assert all(not log[step][2] for step in range(ANSWERED_ELSEWHERE + 1, STEPS)), \
        "after that, every call goes around cache-dit (its count of calls is off)"
    assert record.cached_steps == [] and record.block_evals == (STEPS - 1) * SHAPE.layers
    [warning] = record.warnings
    assert warning.startswith(f"From step {ANSWERED_ELSEWHERE} on, model calls returned without running")
    assert "Use one step cache" in warning


def test_a_run_without_model_calls_names_no_cfg_mode(transformer):
    with open_run(transformer, FAST, conds_per_step=2) as run:
        pass
    assert (record_of(run).cfg_mode, record_of(run).calls, record_of(run).has_separate_cfg) == (None, 0, False)
