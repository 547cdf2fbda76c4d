"""Prompts through the pack's "Load Krea-2 (diffusers)" loader, shared by its safetensors and GGUF tests."""

from __future__ import annotations

import torch

from devkit.comfy_harness import prompt_error
from devkit.krea2_prompts import krea2_prompt

LOADER_NODE = "Krea2DiffusersLoader"


def loader(model_name: str, weight_dtype: str = "default") -> dict:
    return {"class_type": LOADER_NODE, "inputs": {"model_name": model_name, "weight_dtype": weight_dtype}}


def sample(server, prompt: dict) -> torch.Tensor:
    """The saved latent of a prompt that must run."""
    entry = server.run(prompt)
    assert prompt_error(entry) is None, f"{prompt_error(entry)}\n{server.log_tail()}"
    return server.saved_latent(entry, "7")


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def load_error(server, model_name: str, prefix: str) -> str:
    """The error of a one-step prompt whose model must not load."""
    entry = server.run(krea2_prompt(steps=1, loader=loader(model_name), prefix=prefix))
    error = prompt_error(entry)
    assert error is not None, f"{model_name} loaded although it should not"
    return error
