"""Compare Images (Cache-DiT): MAE, PSNR and a difference heatmap of two images, shown on the node."""

from __future__ import annotations

import dataclasses
import logging

from comfy_api.latest import io, ui

from ..adapters.image_compare import PSNR_CAP_DB, Comparison, compare_images
from ..adapters.record.strict_json import finite_or_null
from .plain_errors import plain_errors

logger = logging.getLogger(__name__)


class Krea2CompareImages(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="Krea2CompareImages",
            display_name="Compare Images (Cache-DiT)",
            category="image/Cache-DiT",
            description=(
                "How far a candidate image is from a reference, e.g. the cached image from the uncached one "
                "with the same seed: MAE, PSNR and a difference heatmap, shown on the node. Batches are "
                "compared pair by pair."),
            inputs=[
                io.Image.Input("reference", tooltip="The image to compare against, e.g. without Cache-DiT."),
                io.Image.Input("candidate", tooltip="The image to judge, e.g. with Cache-DiT; same size and batch."),
            ],
            outputs=[
                io.Image.Output("difference", tooltip=(
                    "Where the images differ: black is identical, white the largest difference in the batch.")),
                io.Float.Output("mae_255", tooltip="Mean absolute error in 0-255 units (mean over pairs)."),
                io.Float.Output("psnr_db", tooltip=(
                    f"PSNR in dB (mean over pairs); identical images give {PSNR_CAP_DB:g} dB. "
                    "NaN when an image has non-finite pixels.")),
            ],
            hidden=[io.Hidden.unique_id],
            # An output node runs with nothing connected to its outputs: wire two images, read the node.
            is_output_node=True,
        )

    @classmethod
    def execute(cls, reference, candidate) -> io.NodeOutput:
        with plain_errors():
            comparison = compare_images(reference, candidate)  # a shape mismatch raises with both shapes
        summary = comparison.summary()
        cls._show_on_node(summary)
        heatmap = comparison.heatmap.cpu()
        shown = ui.PreviewImage(heatmap, cls=cls).as_dict()
        shown.update(text=[summary], metrics=[metrics_record(comparison)])
        return io.NodeOutput(heatmap, comparison.mae_255, comparison.psnr_db, ui=shown)

    @classmethod
    def _show_on_node(cls, text: str):
        """The editor draws a node's progress text on the node itself, without an extension."""
        try:
            from server import PromptServer

            PromptServer.instance.send_progress_text(text, str(cls.hidden.unique_id))
        except Exception as error:  # showing the numbers must never fail the comparison
            logger.debug("Compare Images (Cache-DiT): could not show the metrics on the node: %s", error)


def metrics_record(comparison: Comparison) -> dict:
    """The numbers behind the node's text, for API clients (history outputs): strict JSON, NaN as null."""
    record, _ = finite_or_null({
        "mae_255": comparison.mae_255, "psnr_db": comparison.psnr_db,
        "heatmap_scale_255": comparison.heatmap_scale_255, "nonfinite_pixels": comparison.nonfinite_pixels,
        "pairs": [dataclasses.asdict(pair) for pair in comparison.pairs]})
    return record
