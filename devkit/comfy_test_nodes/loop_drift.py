"""``Krea2TestLoopDrift``: ComfyUI's own model code changed for one sampling run, as an upstream update might.

MODEL in, the same MODEL out with an outer-sample wrapper that, while the sampler runs, puts a changed
version of the family's loop, block or final layer on ComfyUI's classes, and puts the originals back in
``finally``. Placed before a cache node, its wrapper is outside the node's: the node's run opens on the
changed code. The changes keep the model's math (but ``own_value_per_block``, whose blocks each scale their
output by their own value), so the uncached image tells whether a cached run stayed right.

A loop is changed by editing its own source, read from ComfyUI at run time (``inspect.getsource``), in
exactly the places a change names; nothing of ComfyUI's code is kept here. Each edit must match once:
when ComfyUI's code moved, the node fails and says which edit no longer applies.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
import textwrap

import comfy.patcher_extension

KREA2_BLOCK_CALL = "combined = block(combined, tvec, freqs, None, "
FLUX_SINGLE_CALL = "img = block(img, vec=vec, pe=pe, "
MINIMAX_BLOCK_CALL = "h = block(h, t_emb, mod_segments, rope_freqs, "
ERNIE_BLOCK_CALL = "hidden_states = layer(hidden_states, rotary_pos_emb, temb)"
ERNIE_FINAL_CALL = "self.final_norm(hidden_states, c)"
# ERNIE-Image's loop tells its blocks no index: the change that hands each block its own value numbers them.
ERNIE_NUMBERED = ("for layer in self.layers:", "for i, layer in enumerate(self.layers):")

# family -> (the class whose method runs the loop, that method, the block class (the list it changes),
#            the final layer class); Flux's double-stream blocks are its own family key, "flux_double".
FAMILIES = {
    "krea2": ("comfy.ldm.krea2.model.SingleStreamDiT", "_forward", "comfy.ldm.krea2.model.SingleStreamBlock",
              "comfy.ldm.krea2.model.LastLayer"),
    "flux": ("comfy.ldm.flux.model.Flux", "forward_orig", "comfy.ldm.flux.layers.SingleStreamBlock",
             "comfy.ldm.flux.layers.LastLayer"),
    "flux_double": ("comfy.ldm.flux.model.Flux", "forward_orig", "comfy.ldm.flux.layers.DoubleStreamBlock",
                    "comfy.ldm.flux.layers.LastLayer"),
    "minimax_h3": ("comfy.ldm.minimax.model.MiniMaxH3Model", "_forward", "comfy.ldm.minimax.model.DiTBlock",
                   "comfy.ldm.minimax.model.FinalLayer"),
    "ernie_image": ("comfy.ldm.ernie.model.ErnieImageModel", "forward",
                    "comfy.ldm.ernie.model.ErnieImageSharedAdaLNBlock", "comfy.ldm.ernie.model.ErnieImageAdaLNContinuous"),
}

# (family, change) -> (edits of the loop's source, the block's change, the final layer's change). A block or
# final layer change is the name of a function below that makes the new forward from the original.
CHANGES = {
    # Harmless: the block's first parameter renamed; called by position, then by its new name.
    ("krea2", "block_first_renamed"): ((), "renamed_first", None),
    ("krea2", "block_hidden_by_its_name"): (
        ((KREA2_BLOCK_CALL, "combined = block(hidden_states=combined, vec=tvec, freqs=freqs, mask=None, "),),
        "renamed_first", None),
    # Harmless: a new optional argument, the same for every block.
    ("krea2", "new_keyword_same_value"): (
        ((KREA2_BLOCK_CALL, KREA2_BLOCK_CALL + "drift_note=freqs, "),), "optional_keyword", None),
    # The loop calls its blocks by keyword, as Flux's loop does.
    ("krea2", "block_hidden_by_keyword"): (
        ((KREA2_BLOCK_CALL, "combined = block(x=combined, vec=tvec, freqs=freqs, mask=None, "),), None, None),
    # Each block gets its own value of a new argument, as Chroma's loop does with its modulation slices.
    ("krea2", "own_value_per_block"): (
        ((KREA2_BLOCK_CALL, KREA2_BLOCK_CALL + "drift_gain=1.0 + 0.05 * i, "),), "gain_keyword", None),
    # A block returns (hidden, extra), which the loop unpacks.
    ("krea2", "block_returns_extra"): (
        (("combined = block(", "combined, _drift_extra = block("),), "returns_extra", None),
    # The block requires a parameter the registry does not know.
    ("krea2", "new_required_parameter"): (
        ((KREA2_BLOCK_CALL, KREA2_BLOCK_CALL + "drift_required=None, "),), "required_keyword", None),
    # The final layer called by keyword, and with its parameters reordered (time first).
    ("krea2", "final_layer_by_keyword"): ((("self.last(combined, t)", "self.last(x=combined, tvec=t)"),), None, None),
    ("krea2", "final_layer_reordered"): ((("self.last(combined, t)", "self.last(t, combined)"),), None, "reordered"),
    # The final layer's feature parameter renamed.
    ("krea2", "final_layer_renamed"): ((), None, "feature_renamed"),
    # The final layer gets a copy of the last block's output, not the output itself.
    ("krea2", "final_layer_gets_a_copy"): ((("self.last(combined, t)", "self.last(combined.clone(), t)"),), None,
                                           None),

    ("flux", "block_hidden_by_keyword"): (((FLUX_SINGLE_CALL, "img = block(x=img, vec=vec, pe=pe, "),), None, None),
    ("flux", "own_value_per_block"): (
        ((FLUX_SINGLE_CALL, FLUX_SINGLE_CALL + "drift_gain=1.0 + 0.05 * i, "),), "gain_keyword", None),
    ("flux_double", "own_value_per_block"): (
        (("img, txt = block(img=img,", "img, txt = block(drift_gain=1.0 + 0.05 * i, img=img,"),), "gain_keyword", None),
    ("flux", "block_returns_extra"): (((FLUX_SINGLE_CALL, "img, _drift_extra = block(img, vec=vec, pe=pe, "),),
                                      "returns_extra", None),
    ("flux", "final_layer_reordered"): (
        (("self.final_layer(img, vec_orig, ", "self.final_layer(vec_orig, img, "),), None, "reordered"),
    ("flux", "final_layer_gets_a_copy"): (
        (("img = img[:, txt.shape[1] :, ...]", "img = img[:, txt.shape[1] :, ...].clone()"),), None, None),

    ("minimax_h3", "block_hidden_by_keyword"): (
        ((MINIMAX_BLOCK_CALL, "h = block(x=h, t_emb=t_emb, mod_segments=mod_segments, rope_freqs=rope_freqs, "),),
        None, None),
    ("minimax_h3", "own_value_per_block"): (
        ((MINIMAX_BLOCK_CALL, MINIMAX_BLOCK_CALL + "drift_gain=1.0 + 0.05 * i, "),), "gain_keyword", None),
    ("minimax_h3", "block_returns_extra"): (((MINIMAX_BLOCK_CALL, "h, _drift_extra = " + MINIMAX_BLOCK_CALL[4:]),),
                                            "returns_extra", None),
    ("minimax_h3", "final_layer_reordered"): (
        (("self.final_layer(h, t_emb, ", "self.final_layer(t_emb, h, "),), None, "reordered"),
    ("minimax_h3", "final_layer_gets_a_copy"): (
        (("self.final_layer(h, t_emb, ", "self.final_layer(h.clone(), t_emb, "),), None, None),

    ("ernie_image", "block_hidden_by_keyword"): (
        ((ERNIE_BLOCK_CALL, "hidden_states = layer(x=hidden_states, rotary_pos_emb=rotary_pos_emb, temb=temb)"),),
        None, None),
    ("ernie_image", "own_value_per_block"): (
        (ERNIE_NUMBERED, (ERNIE_BLOCK_CALL, ERNIE_BLOCK_CALL[:-1] + ", drift_gain=1.0 + 0.05 * i)")), "gain_keyword",
        None),
    ("ernie_image", "block_returns_extra"): (
        ((ERNIE_BLOCK_CALL, ERNIE_BLOCK_CALL.replace("hidden_states =", "hidden_states, _drift_extra =", 1)),),
        "returns_extra", None),
    ("ernie_image", "final_layer_reordered"): (
        ((ERNIE_FINAL_CALL, "self.final_norm(c, hidden_states)"),), None, "reordered"),
    ("ernie_image", "final_layer_gets_a_copy"): (
        ((ERNIE_FINAL_CALL, "self.final_norm(hidden_states.clone(), c)"),), None, None),
}


# --- new forwards made from the original ----------------------------------------------------------------

def _with_signature(forward, original, parameters):
    forward.__signature__ = inspect.signature(original).replace(parameters=parameters)
    forward.__name__ = forward.__qualname__ = original.__name__
    return forward


def _renamed(original, new_name: str):
    """The first parameter after ``self`` renamed; a call by the new name still reaches the original."""
    self_, first, *rest = inspect.signature(original).parameters.values()

    def forward(self, *args, **kwargs):
        if new_name in kwargs:
            args = (kwargs.pop(new_name), *args)
        return original(self, *args, **kwargs)

    return _with_signature(forward, original, [self_, first.replace(name=new_name), *rest])


def renamed_first(original):
    """A block's hidden state renamed (``x`` -> ``hidden_states``)."""
    return _renamed(original, "hidden_states")


def feature_renamed(original):
    """A final layer's feature renamed (``x`` -> ``feature``)."""
    return _renamed(original, "feature")


def _keyword_added(original, name, required):
    parameters = list(inspect.signature(original).parameters.values())
    default = inspect.Parameter.empty if required else None
    added = inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
    positional = [p for p in parameters if p.kind != inspect.Parameter.VAR_KEYWORD]
    return [*positional, added, *[p for p in parameters if p.kind == inspect.Parameter.VAR_KEYWORD]]


def optional_keyword(original):
    def forward(self, *args, drift_note=None, **kwargs):
        return original(self, *args, **kwargs)

    return _with_signature(forward, original, _keyword_added(original, "drift_note", required=False))


def required_keyword(original):
    def forward(self, *args, drift_required, **kwargs):
        return original(self, *args, **kwargs)

    return _with_signature(forward, original, _keyword_added(original, "drift_required", required=True))


def gain_keyword(original):
    """Each block scales its output (a pair's first: the image tokens) by the ``drift_gain`` it is handed."""
    def forward(self, *args, drift_gain=None, **kwargs):
        out = original(self, *args, **kwargs)
        if drift_gain is None:
            return out
        return (out[0] * drift_gain, *out[1:]) if isinstance(out, tuple) else out * drift_gain

    return _with_signature(forward, original, _keyword_added(original, "drift_gain", required=False))


def returns_extra(original):
    def forward(self, *args, **kwargs):
        return original(self, *args, **kwargs), None

    return _with_signature(forward, original, list(inspect.signature(original).parameters.values()))


def reordered(original):
    """The first two parameters after ``self`` swapped (the feature second)."""
    self_, first, second, *rest = inspect.signature(original).parameters.values()

    def forward(self, *args, **kwargs):
        if len(args) >= 2:
            args = (args[1], args[0], *args[2:])
        return original(self, *args, **kwargs)

    return _with_signature(forward, original, [self_, second, first, *rest])


NEW_FORWARDS = {f.__name__: f for f in (renamed_first, feature_renamed, optional_keyword, required_keyword, gain_keyword,
                                        returns_extra, reordered)}


# --- applying a change for one run ------------------------------------------------------------------------

def _class(path: str):
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def edited_method(cls, name: str, edits) -> object:
    """``cls.name`` compiled again from its own source with ``edits`` ((old, new) pairs) applied."""
    source = textwrap.dedent(inspect.getsource(cls.__dict__[name]))
    for old, new in edits:
        if source.count(old) != 1:
            raise RuntimeError(f"Krea2TestLoopDrift: {cls.__name__}.{name} holds {old!r} {source.count(old)} times, "
                               f"not once: ComfyUI's code moved; update the change.")
        source = source.replace(old, new)
    namespace: dict = {}
    exec(compile(source, f"<{cls.__qualname__}.{name} changed>", "exec"), sys.modules[cls.__module__].__dict__,
         namespace)
    return namespace[name]


@contextlib.contextmanager
def changed(family: str, change: str):
    """ComfyUI's classes changed as ``(family, change)`` says, put back however the block ends."""
    loop_class, loop_method, block_class, final_class = FAMILIES[family]
    edits, block_change, final_change = CHANGES[(family, change)]
    replaced = []   # (class, attribute, original)
    try:
        if edits:
            cls = _class(loop_class)
            replaced.append((cls, loop_method, cls.__dict__[loop_method]))
            setattr(cls, loop_method, edited_method(cls, loop_method, edits))
        for path, new_forward in ((block_class, block_change), (final_class, final_change)):
            if new_forward is not None:
                cls = _class(path)
                replaced.append((cls, "forward", cls.__dict__["forward"]))
                cls.forward = NEW_FORWARDS[new_forward](cls.__dict__["forward"])
        yield
    finally:
        for cls, attribute, original in reversed(replaced):
            setattr(cls, attribute, original)


class Krea2TestLoopDrift:
    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "family": (sorted(FAMILIES),),
                             "change": (sorted({change for _, change in CHANGES}),)}}

    def patch(self, model, family, change):
        if (family, change) not in CHANGES:
            raise ValueError(f"Krea2TestLoopDrift: no change {change!r} for {family!r}")
        model = model.clone()

        def outer_sample(executor, *args, **kwargs):
            with changed(family, change):
                return executor(*args, **kwargs)

        model.add_wrapper_with_key(comfy.patcher_extension.WrappersMP.OUTER_SAMPLE, "krea2_test_loop_drift",
                                   outer_sample)
        return (model,)


LOOP_DRIFT_NODES = {"Krea2TestLoopDrift": Krea2TestLoopDrift}
