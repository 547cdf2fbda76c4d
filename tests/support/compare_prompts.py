"""API prompts for the Krea2CompareImages node on stock EmptyImage colours, and the PNGs it saves."""

from __future__ import annotations


def grey(level: int) -> int:
    """EmptyImage's color input (0xRRGGBB) for a uniform grey."""
    return level * 0x010101


def compare_prompt(reference: list, candidate: list, prefix: str) -> dict:
    """Two EmptyImage batches -> Krea2CompareImages; its FLOATs read back through stock PreviewAny nodes.

    ``reference``/``candidate``: (grey level, width, height, batch). Node ids: "3" the compare node,
    "4"/"5" PreviewAny of mae_255/psnr_db, "6" SaveImage of the heatmap.
    """
    def empty(level, width, height, batch):
        return {"class_type": "EmptyImage",
                "inputs": {"width": width, "height": height, "batch_size": batch, "color": grey(level)}}

    return {
        "1": empty(*reference), "2": empty(*candidate),
        "3": {"class_type": "Krea2CompareImages", "inputs": {"reference": ["1", 0], "candidate": ["2", 0]}},
        "4": {"class_type": "PreviewAny", "inputs": {"source": ["3", 1]}},
        "5": {"class_type": "PreviewAny", "inputs": {"source": ["3", 2]}},
        "6": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": f"compare/{prefix}"}},
    }


def saved_pngs(server, entry: dict, node_id: str, folder: str):
    from PIL import Image

    images = []
    for item in entry["outputs"][node_id]["images"]:
        with Image.open(server.base_dir / folder / item["subfolder"] / item["filename"]) as png:
            images.append(png.convert("RGB"))
    return images
